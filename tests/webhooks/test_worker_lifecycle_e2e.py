"""End to end, the engine's life in a real ``qcluster`` (PostgreSQL + Redis): how it stops,
what a crash costs, a broker outage, and retries due just after a start.

Exit is awaited generously and never timed here; ``bench/deliveries.py`` measures how long
stops take and how late retries are.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import Schedule
from django_q.tasks import async_task
from rest_framework.test import APIClient

from accounts.models import Organization
from gshost.schedules import ensure_schedules
from servers.models import Server, ServerState
from tests.conftest import API, KeyMaker
from tests.processes import group_members
from tests.webhooks.delivery_fixtures import (
    Hooks,
    requests_for,
    wait_for,
)
from tests.webhooks.own_redis import OwnRedis
from tests.webhooks.receiver import HttpsReceiver
from tests.webhooks.worker_cluster import (
    needs_postgres_and_redis,
    purge_queued_tasks,
    start_cluster,
    stop_cluster,
    wait_until_cluster_runs,
)
from webhooks.events import Event
from webhooks.models import Delivery, DeliveryStatus
from webhooks.services import publish_event

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), needs_postgres_and_redis]

WORKERS = 2
SENDER_THREADS = 16
CLAIM_ROWS = 4
EXIT_WAIT_SECONDS = 60.0  # generous: exit must happen; how fast is the benchmark's business

Cluster = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture(name="cluster")
def cluster_fixture(receiver: HttpsReceiver, tmp_path: Path) -> Iterator[Cluster]:
    purge_queued_tasks()
    ensure_schedules()
    started: list[subprocess.Popen[bytes]] = []

    def start(**overrides: str) -> subprocess.Popen[bytes]:
        process = start_cluster(
            receiver,
            tmp_path / f"qcluster-{len(started)}.log",
            WEBHOOK_TIMEOUT_SECONDS="5",
            WEBHOOK_LEASE_MARGIN_SECONDS="1",
            WEBHOOK_SENDER_THREADS=str(SENDER_THREADS),
            WEBHOOK_CLAIM_ROWS=str(CLAIM_ROWS),
            Q_WORKERS=str(WORKERS),
            **overrides,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        stop_cluster(process)


def publish_many(hooks: Hooks, count: int) -> list[str]:
    ids: list[str] = []
    with transaction.atomic():
        for n in range(count):
            ids += [
                d.id
                for d in publish_event(
                    organization_id=hooks.organization.id,
                    server_id=f"srv_{n}",
                    server_name="Lifecycle",
                    event=Event.SERVER_STOPPED,
                    data={"previous_state": "stopping"},
                )
            ]
    return ids


def queue_slow_tasks(notes: Path, count: int) -> set[str]:
    """Tasks that keep both workers busy and the cluster's task queue full for a while."""
    marks = {f"task-{n}" for n in range(count)}
    for mark in sorted(marks):
        async_task("tests.webhooks.worker_cluster.note_after", str(notes), 0.5, mark)
    return marks


def noted(notes: Path) -> list[str]:
    return notes.read_text().split() if notes.exists() else []


def all_succeeded(ids: list[str]) -> bool:
    return Delivery.objects.filter(id__in=ids, status=DeliveryStatus.SUCCESS).count() == len(ids)


def exits(process: subprocess.Popen[bytes]) -> bool:
    """The cluster's main process ended and left no process of its group behind."""
    try:
        process.wait(timeout=EXIT_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        return False
    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    while group_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not group_members(process.pid)


@pytest.mark.parametrize(
    "send_signal",
    [
        pytest.param(lambda p: os.kill(p.pid, signal.SIGTERM), id="sigterm-main-process"),
        pytest.param(lambda p: os.killpg(p.pid, signal.SIGTERM), id="sigterm-process-group"),
        pytest.param(lambda p: os.killpg(p.pid, signal.SIGINT), id="ctrl-c"),
    ],
)
def test_a_stopped_worker_exits_with_deliveries_in_flight_and_loses_none(
    hooks: Hooks,
    receiver: HttpsReceiver,
    cluster: Cluster,
    send_signal: Callable[[subprocess.Popen[bytes]], None],
    tmp_path: Path,
) -> None:
    receiver.set_behaviour(delay=1.5)
    for n in range(8):
        hooks.webhook(f"/slow/{n}")
    first = cluster()
    ids = publish_many(hooks, 40)  # 320 deliveries, 1.5 s each
    # Queued tasks waiting at the stop: a worker leaving its loop early would drop them, and a
    # pusher blocked on the full task queue would keep the cluster from ever exiting.
    notes = tmp_path / "notes.txt"
    marks = queue_slow_tasks(notes, 60)  # 15 s of work for the two workers
    wait_for(lambda: len(receiver.requests) >= 10 and len(noted(notes)) >= 1, timeout=30)

    send_signal(first)

    assert exits(first)
    assert Delivery.objects.filter(id__in=ids, status=DeliveryStatus.SUCCESS).exists()
    receiver.set_behaviour(delay=0.0)
    cluster()
    wait_for(lambda: all_succeeded(ids), timeout=120)
    wait_for(lambda: set(noted(notes)) == marks, timeout=120)


def test_a_killed_worker_loses_nothing_and_resends_only_what_was_unrecorded(
    hooks: Hooks, receiver: HttpsReceiver, cluster: Cluster
) -> None:
    receiver.set_behaviour(delay=0.05)
    for n in range(20):
        hooks.webhook(f"/hook/{n}")
    first = cluster()
    ids = publish_many(hooks, 50)  # 1,000 deliveries
    wait_for(lambda: len(receiver.requests) >= 200, timeout=60)

    stop_cluster(first)  # SIGKILL to the whole group, mid-burst
    cluster()

    wait_for(lambda: all_succeeded(ids), timeout=120)
    sent = Counter(r.header("X-Webhook-Delivery") for r in receiver.requests)
    resent = sum(1 for delivery_id in ids if sent[delivery_id] > 1)
    assert all(sent[delivery_id] >= 1 for delivery_id in ids)
    # At most the rows the senders held: each claims CLAIM_ROWS at a time.
    assert resent <= WORKERS * SENDER_THREADS * CLAIM_ROWS


def test_a_retry_due_just_after_the_worker_starts_is_attempted_without_a_scheduler(
    hooks: Hooks, receiver: HttpsReceiver, cluster: Cluster
) -> None:
    webhook = hooks.webhook()
    retry = hooks.delivery(
        webhook,
        status=DeliveryStatus.RETRY_SCHEDULED,
        automatic_attempts=1,
        next_attempt_at=timezone.now() + timedelta(seconds=3),
    )
    assert not Schedule.objects.filter(func__startswith="webhooks.tasks.sweep").exists()

    cluster()

    wait_for(lambda: len(requests_for(receiver, retry.id)) == 1, timeout=30)
    wait_for(lambda: Delivery.objects.get(pk=retry.pk).status == DeliveryStatus.SUCCESS)


# --- a broker outage --------------------------------------------------------------------------


@pytest.fixture(name="own_redis")
def own_redis_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[OwnRedis]:
    redis = OwnRedis(tmp_path)
    redis.start()
    # This process queues its tasks on the same Redis as the cluster.
    monkeypatch.setattr(Conf, "REDIS", redis.url)
    yield redis
    redis.kill()


def test_a_power_action_during_a_broker_outage_answers_202_and_everything_follows(
    receiver: HttpsReceiver,
    cluster: Cluster,
    own_redis: OwnRedis,
    engine_settings: Any,
    make_key: KeyMaker,
    acme: Organization,
    acme_server: Server,
) -> None:
    hooks = Hooks(acme, receiver)
    hooks.webhook()
    cluster(REDIS_URL=own_redis.url, SIMULATED_RUNTIME_DELAY_SECONDS="1")
    wait_until_cluster_runs(own_redis.url)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_key(['servers:power']).full_key}")
    own_redis.kill()

    response = client.post(
        f"{API}/servers/{acme_server.id}/power", {"action": "start"}, format="json"
    )

    assert response.status_code == 202
    own_redis.start()
    wait_for(lambda: Server.objects.get(pk=acme_server.pk).state == ServerState.RUNNING, timeout=60)
    wait_for(lambda: Delivery.objects.filter(status=DeliveryStatus.SUCCESS).exists(), 60)
    assert all_succeeded(list(Delivery.objects.values_list("id", flat=True)))
    assert [r.header("X-Webhook-Event") for r in receiver.requests] == ["server.started"]
