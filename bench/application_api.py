"""Benchmark: creating servers through the Application API, placed on a fleet of stand-in nodes.

The control plane served by gunicorn (the shipped gunicorn.conf.py, 2 processes x 8 threads) on
PostgreSQL + Redis, with BENCH_NODES agent nodes registered through the service (online: this
process sends their heartbeats as one UPDATE every 10 s; no agent is called, since a new server
starts stopped). Three phases in the same run:

1. baseline: `manage.py createserver`'s own placement, in-process (`call_command`), one create
   after the other: creates per second, and each create's time p50/p99;
2. `POST /api/application/v1/servers` from BENCH_CLIENTS concurrent clients, each create with
   its own external id and Idempotency-Key: creates per second and response times p50/p99;
3. BENCH_RETRIES concurrent, identical creates with one Idempotency-Key (a billing system
   retrying on time-outs): how many servers they made (must be 1), and their answer times.

    python bench/application_api.py           # BENCH_NODES (500), BENCH_CREATES (500),
                                              # BENCH_CLIENTS (4), BENCH_RETRIES (50)
    python bench/application_api.py --small   # 500 nodes, 100 creates per phase

Needs PostgreSQL and Redis (scripts/ensure-services.sh).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from io import StringIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("BENCH_DB_NAME", "gshost_bench_application")
os.environ.setdefault("BENCH_REDIS_DB", "4")
os.environ.setdefault("EMAIL_BACKEND", "django.core.mail.backends.locmem.EmailBackend")

import requests

from bench.delivery_rig import ENV, percentile, prepare_database, setup_django
from bench.web_rig import gunicorn_start, gunicorn_stop

SMALL = "--small" in sys.argv
NODES = int(os.environ.get("BENCH_NODES", "500"))
CREATES = int(os.environ.get("BENCH_CREATES", "100" if SMALL else "500"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "4"))
RETRIES = int(os.environ.get("BENCH_RETRIES", "50"))
LIMITS = {"memory_mb": 512, "disk_mb": 1024, "cpu_percent": 100, "processes": 64}
HEARTBEAT_SECONDS = 10.0


def make_fleet() -> None:
    """NODES agent nodes with room for every create of the run, offering minecraft."""
    from servers.fleet.nodes import NodeInput, node_create
    from servers.models import Node

    for n in range(NODES):
        node_create(
            data=NodeInput(
                name=f"node-{n}", url=f"https://10.0.{n // 250}.{n % 250 + 1}:8444",
                address=f"10.0.{n // 250}.{n % 250 + 1}", ports="27000-27099",
            )
        )  # fmt: skip
    Node.objects.filter(kind="agent").update(
        memory_mb=65536, disk_mb=1_000_000, cpu_percent=1600, games=["minecraft", "demo"]
    )


def heartbeats(stop: threading.Event) -> None:
    """Every node's heartbeat, as one UPDATE every 10 s: they stay online."""
    from django.db import connection
    from django.utils import timezone

    from servers.models import Node

    while not stop.is_set():
        Node.objects.filter(kind="agent").update(last_heartbeat_at=timezone.now())
        stop.wait(HEARTBEAT_SECONDS)
    connection.close()


def customer_and_key() -> tuple[str, str]:
    from application.customers import CustomerInput, customer_create
    from application.integration_keys import integration_key_create
    from application.scopes import CATALOGUE

    key = integration_key_create(name="bench", scopes=CATALOGUE)
    organization, _ = customer_create(
        integration_pk=key.key.pk,
        data=CustomerInput(
            external_id="c-1", name="Bench", owner_email="o@bench.test", owner_name="O",
            request_hash="",
        ),
    )  # fmt: skip
    return organization.id, key.full_key


def baseline(slug: str) -> tuple[float, list[float]]:
    from django.core.management import call_command

    times = []
    started = time.perf_counter()
    for n in range(CREATES):
        began = time.perf_counter()
        call_command(
            "createserver", slug, f"cli-{n}", "--game", "minecraft",
            "--memory", str(LIMITS["memory_mb"]), "--disk", str(LIMITS["disk_mb"]),
            stdout=StringIO(),
        )  # fmt: skip
        times.append(time.perf_counter() - began)
    return CREATES / (time.perf_counter() - started), times


class Client:
    def __init__(self, url: str, key: str, customer: str) -> None:
        self.url, self.key, self.customer = url, key, customer
        self.local = threading.local()

    def create(self, external_id: str, idempotency_key: str) -> tuple[float, int, str]:
        session = getattr(self.local, "session", None)
        if session is None:
            session = self.local.session = requests.Session()
            session.trust_env = False
        body = {"external_id": external_id, "customer": self.customer, "name": "mc",
                "game": "minecraft", "limits": LIMITS}  # fmt: skip
        began = time.perf_counter()
        answer = session.post(
            f"{self.url}/api/application/v1/servers", json=body, timeout=60,
            headers={"Authorization": f"Bearer {self.key}", "Idempotency-Key": idempotency_key},
        )  # fmt: skip
        elapsed = time.perf_counter() - began
        return elapsed, answer.status_code, answer.json().get("id", answer.text)


def through_the_api(client: Client) -> tuple[float, list[float], set[int]]:
    started = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(lambda n: client.create(f"s-{n}", f"k-{n}"), range(CREATES)))
    rate = CREATES / (time.perf_counter() - started)
    return rate, [r[0] for r in results], {r[1] for r in results}


def retried(client: Client) -> tuple[list[float], set[int], set[str]]:
    start = threading.Barrier(RETRIES)

    def once(_: int) -> tuple[float, int, str]:
        start.wait()
        return client.create("retried-1", "retried-key")

    with ThreadPoolExecutor(RETRIES) as pool:
        results = list(pool.map(once, range(RETRIES)))
    return [r[0] for r in results], {r[1] for r in results}, {r[2] for r in results}


def ms(values: list[float], fraction: float) -> str:
    return f"{percentile(values, fraction) * 1000:.1f}"


def main() -> int:
    prepare_database()
    setup_django()
    from tests.agent.lines import free_port

    make_fleet()
    customer, key = customer_and_key()
    from accounts.models import Organization

    slug = Organization.objects.get(id=customer).slug
    stop = threading.Event()
    beating = threading.Thread(target=heartbeats, args=(stop,), daemon=True)
    beating.start()
    port = free_port()
    metrics = Path(tempfile.mkdtemp(prefix="gshost-bench-application-"))
    # The per-key rate limit (240/min) would answer most of the run 429: it is measured
    # elsewhere (bench/auth.py); here the creates are.
    unlimited = {"API_RATE_APPLICATION": "100000/min"}
    web = gunicorn_start(
        port,
        access_log="/dev/null",
        env={**ENV, **unlimited, "PROMETHEUS_MULTIPROC_DIR": str(metrics)},
    )
    try:
        print(f"{NODES} stand-in nodes, {CREATES} creates per phase, {CLIENTS} API clients")
        base_rate, base_times = baseline(slug)
        print(
            f"createserver (in-process): {base_rate:.1f} creates/s, "
            f"p50 {ms(base_times, 0.5)} ms, p99 {ms(base_times, 0.99)} ms"
        )
        client = Client(f"http://127.0.0.1:{port}", key, customer)
        rate, times, statuses = through_the_api(client)
        print(
            f"POST /servers ({CLIENTS} clients): {rate:.1f} creates/s (x{rate / base_rate:.2f} "
            f"createserver), p50 {ms(times, 0.5)} ms, p99 {ms(times, 0.99)} ms, "
            f"statuses {sorted(statuses)}"
        )
        from servers.models import Server

        before = Server.objects.count()
        times, statuses, ids = retried(client)
        made = Server.objects.count() - before
        print(
            f"{RETRIES} concurrent retries with one Idempotency-Key: {made} server made, "
            f"{len(ids)} distinct answer, statuses {sorted(statuses)}, "
            f"answered p50 {ms(times, 0.5)} ms, p99 {ms(times, 0.99)} ms"
        )
        return 0 if made == 1 and len(ids) == 1 else 1
    finally:
        stop.set()
        gunicorn_stop(web)


if __name__ == "__main__":
    sys.exit(main())
