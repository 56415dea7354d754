"""The rig the delivery benchmarks run on: a local HTTPS receiver in its own process, the real
``qcluster`` on PostgreSQL + Redis (its own database and Redis database, made anew for each
run), publishing from this process, and the workers' record-delay histogram.

Used by bench/deliveries.py (throughput and latency) and bench/delivery_operations.py (the
engine in operation). Not run on its own.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = Path(sys.executable)
# Each checkout benches on a database and Redis db of its own (BENCH_DB_NAME, BENCH_REDIS_DB).
DB_NAME = os.environ.get("BENCH_DB_NAME", "gshost_bench_deliveries")
REDIS_DB = os.environ.get("BENCH_REDIS_DB", "12")
DOMAIN = "bench.example.com"
HEALTHY_WEBHOOKS = 50
RECORD_DELAY_TARGET_SECONDS = 0.05
# The workers' Prometheus files (prometheus-client's multi-process mode), emptied per scenario.
METRICS_DIR = Path(tempfile.gettempdir()) / "gshost-bench-deliveries-metrics"

ENV = {
    **os.environ,
    "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
    "REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
    "DEBUG": "false",
    "SECRET_KEY": "bench-secret-key-not-for-production",
    "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
    "LOG_LEVEL": "WARNING",
    "WEBHOOKS_PER_ORGANIZATION": "100",  # 50 healthy webhooks and 10 dead ones in one
}


# --- the receiver, in its own process ----------------------------------------------------------


def _serve(conn: Connection, dead_paths: list[str], behaviours: dict[str, dict[str, Any]]) -> None:
    from tests.webhooks.receiver import HttpsReceiver, ReceivedRequest

    class CompactReceiver(HttpsReceiver):
        """Keeps (delivery id, arrival) and (delivery id, answer written) only: tens of
        thousands of full records would make its garbage collector, and so its answers, slower
        as the run goes on."""

        arrivals: list[tuple[str | None, float]] = []
        answers: list[tuple[str | None, float]] = []
        # A drain's swap between a handler reading a list and appending to it would lose that
        # entry: appends and the swap take turns.
        lock = threading.Lock()

        def _record(self, request: ReceivedRequest) -> None:
            arrival = (request.header("X-Webhook-Delivery"), request.received_at)
            with self.lock:
                self.arrivals.append(arrival)

        def _respond(self, handler: Any, behaviour: Any) -> None:
            super()._respond(handler, behaviour)
            answer = (handler.headers.get("X-Webhook-Delivery"), time.monotonic())
            with self.lock:
                self.answers.append(answer)

        def take(self) -> tuple[list[tuple[str | None, float]], list[tuple[str | None, float]]]:
            with self.lock:
                taken = self.arrivals, self.answers
                self.arrivals, self.answers = [], []
            return taken

    receiver = CompactReceiver(names=(f"*.{DOMAIN}",))
    receiver.start()
    for path in dead_paths:
        receiver.set_behaviour(path=path, hang=True)
    for path, fields in behaviours.items():
        receiver.set_behaviour(path=path or None, **fields)
    conn.send((receiver.port, receiver.ca_pem_path))
    while True:
        command = conn.recv()
        if command == "drain":
            conn.send(receiver.take())
        elif command == "stop":
            conn.send(None)
            os._exit(0)  # hanging handler threads would keep a clean stop waiting


class Receiver:
    def __init__(
        self, dead_paths: list[str], behaviours: dict[str, dict[str, Any]] | None = None
    ) -> None:
        """``behaviours``: receiver behaviour fields by path ("" for every other path)."""
        self._conn, child = multiprocessing.Pipe()
        self._process = multiprocessing.get_context("fork").Process(
            target=_serve, args=(child, dead_paths, behaviours or {}), daemon=True
        )
        self._process.start()
        roles["receiver"] = self._process.pid or 0
        self.port, self.ca_pem_path = self._conn.recv()
        self.seen: dict[str, float] = {}  # delivery id -> first arrival
        self.arrivals: dict[str, list[float]] = {}  # delivery id -> every arrival
        # delivery id -> when its first answer was written: from then on the sender could have
        # had it, whatever the receiver's own lag in taking the request
        self.first_answer: dict[str, float] = {}

    def drain(self) -> None:
        self._conn.send("drain")
        arrivals, answers = self._conn.recv()
        for delivery_id, received_at in arrivals:
            if delivery_id and delivery_id not in self.seen:
                self.seen[delivery_id] = received_at
            if delivery_id:
                self.arrivals.setdefault(delivery_id, []).append(received_at)
        for delivery_id, answered_at in answers:
            if delivery_id:
                self.first_answer.setdefault(delivery_id, answered_at)

    def stop(self) -> None:
        self._conn.send("stop")
        self._process.join(timeout=5)


# --- the worker --------------------------------------------------------------------------------


def start_worker(ca_pem_path: str, **overrides: str) -> subprocess.Popen[bytes]:
    env = {
        **ENV,
        "WEBHOOK_CA_BUNDLE": ca_pem_path,
        "PROMETHEUS_MULTIPROC_DIR": str(METRICS_DIR),
        **overrides,
    }
    return subprocess.Popen(
        [str(PYTHON), "-m", "tests.webhooks.loopback_qcluster"],
        cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip


def cpu_seconds() -> dict[str, float]:
    """CPU time used so far by the worker group, the receiver, PostgreSQL, Redis and this one."""
    from tests.processes import processes

    totals: dict[str, float] = {}
    for found in processes():
        if found.group == roles.get("worker"):
            role = "worker"
        elif found.pid == roles.get("receiver"):
            role = "receiver"
        elif found.pid == os.getpid():
            role = "bench"
        elif found.name.startswith(("postgres", "redis")):
            role = found.name.split(":")[0].split("-")[0]
        else:
            continue
        totals[role] = totals.get(role, 0.0) + found.cpu_seconds
    return totals


roles: dict[str, int] = {}


def group_memory_mb(pgid: int) -> float:
    """Proportional memory (PSS) summed over the worker's process group. RSS would count the
    pages the forked processes share once in each of them."""
    import psutil

    from tests.processes import group_members

    total = 0
    for pid in group_members(pgid):
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(pid).memory_full_info().pss
    return total / 1024 / 1024


# --- set-up and publishing -----------------------------------------------------------------------


def prepare_database() -> None:
    # WITH (FORCE): an earlier scenario of the same run may still hold a connection.
    for sql in (f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)", f"CREATE DATABASE {DB_NAME}"):
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", sql], check=True)
    subprocess.run(["redis-cli", "-n", REDIS_DB, "flushdb"], check=True, capture_output=True)
    shutil.rmtree(METRICS_DIR, ignore_errors=True)
    METRICS_DIR.mkdir()
    subprocess.run(
        [str(PYTHON), "manage.py", "migrate", "--noinput"],
        cwd=ROOT, env=ENV, check=True, capture_output=True,
    )  # fmt: skip


def setup_django() -> None:
    os.environ.update(ENV)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gshost.settings")
    import django

    django.setup()


def create_webhooks(port: int, prefix: str, count: int, path: str) -> tuple[str, list[str]]:
    from accounts.models import Organization
    from audit.actors import Actor
    from webhooks.services import webhook_create

    organization, _ = Organization.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    ids = []
    for n in range(count):
        webhook, _secret = webhook_create(
            organization=organization,
            url=f"https://{prefix}-{n}.{DOMAIN}:{port}{path}/{n}",
            events=["server.crashed"],
            actor=Actor.system("bench"),
        )
        ids.append(webhook.id)
    return organization.id, ids


def publish(organization_id: str) -> tuple[float, list[tuple[str, str]]]:
    """One event; returns the publish time and (delivery id, webhook id) of its deliveries."""
    from django.db import transaction

    from webhooks.events import Event
    from webhooks.services import publish_event

    started = time.monotonic()
    with transaction.atomic():
        deliveries = publish_event(
            organization_id=organization_id,
            server_id="srv_bench",
            server_name="Bench world",
            event=Event.SERVER_CRASHED,
            data={"reason": "exited", "exit_code": 1},
        )
    return started, [(d.id, d.webhook_id) for d in deliveries]


def publish_burst(organization_id: str, deliveries: int) -> list[str]:
    """``deliveries`` rows (fan-out 50) in one transaction: all due at once when it commits."""
    from django.db import transaction

    with transaction.atomic():
        return [
            delivery_id
            for _ in range(deliveries // HEALTHY_WEBHOOKS)
            for delivery_id, _ in publish(organization_id)[1]
        ]


def unsettled() -> int:
    """Rows still waiting for an attempt (the index on status makes this cheap)."""
    from webhooks.models import Delivery, DeliveryStatus

    open_statuses = [DeliveryStatus.PENDING, DeliveryStatus.RETRY_SCHEDULED]
    return Delivery.objects.filter(status__in=open_statuses).count()


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


RecordDelays = list[tuple[float, float]]  # (bucket bound in s, batches at or under it)


def record_delay_buckets() -> RecordDelays:
    """The workers' record-delay histogram so far (the oldest attempt of each recorded batch:
    how long it waited for its commit, so what a kill at that moment would send again)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(METRICS_DIR))
    return sorted(
        (float(sample.labels["le"]), sample.value)
        for metric in registry.collect()
        if metric.name == "gshost_webhook_record_delay_seconds"
        for sample in metric.samples
        if sample.name.endswith("_bucket")
    )


def record_delays(
    what: str, before: RecordDelays | None = None, until: RecordDelays | None = None
) -> list[str]:
    """Print the record delay between two snapshots (by default: the start, and now)."""
    earlier = dict(before or [])
    later = until if until is not None else record_delay_buckets()
    cumulative = [(le, count - earlier.get(le, 0.0)) for le, count in later]
    batches = cumulative[-1][1] if cumulative else 0
    if not batches:
        return [f"no record delay was measured ({what})"]
    p50, p90, p99, most = (
        next(le for le, count in cumulative if count >= share * batches)
        for share in (0.5, 0.9, 0.99, 1.0)
    )
    print(
        f"  {what}: finished attempts recorded within p50 <= {p50 * 1000:.0f} ms, p90 <= "
        f"{p90 * 1000:.0f} ms, p99 <= {p99 * 1000:.0f} ms, all <= "
        f"{most * 1000:.0f} ms ({batches:.0f} batches; target p99 <= "
        f"{RECORD_DELAY_TARGET_SECONDS * 1000:.0f} ms)"
    )
    return [] if p99 <= RECORD_DELAY_TARGET_SECONDS else [f"record delay ({what}) p99 {p99} s"]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
