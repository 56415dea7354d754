"""End to end: a real ``qcluster`` process on PostgreSQL with the Redis broker.

The worker runs in a subprocess against the test database (rows are committed: transactional
tests), resolving the receiver's public-looking name to loopback. Skipped unless the suite runs
on PostgreSQL with REDIS_URL set.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from gshost.schedules import ensure_schedules
from tests.webhooks.delivery_fixtures import (
    Hooks,
    expected_signature,
    requests_for,
    wait_for,
)
from tests.webhooks.receiver import HttpsReceiver
from tests.webhooks.worker_cluster import (
    needs_postgres_and_redis,
    purge_queued_tasks,
    start_cluster,
    stop_cluster,
)
from webhooks.events import Event
from webhooks.models import Delivery, DeliveryAttempt, DeliveryStatus
from webhooks.services import publish_event

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), needs_postgres_and_redis]

Cluster = Callable[[], subprocess.Popen[bytes]]


@pytest.fixture(name="cluster")
def cluster_fixture(receiver: HttpsReceiver, tmp_path: Path) -> Iterator[Cluster]:
    """Starts worker clusters (each in its own process group); stops them afterwards."""
    purge_queued_tasks()
    ensure_schedules()  # transactional tests empty every table, schedules included
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        process = start_cluster(
            receiver,
            tmp_path / f"qcluster-{len(started)}.log",
            WEBHOOK_TIMEOUT_SECONDS="5",
            WEBHOOK_LEASE_MARGIN_SECONDS="1",
            Q_WORKERS="2",
        )
        started.append(process)
        return process

    yield start
    for process in started:
        stop_cluster(process)


def publish(hooks: Hooks) -> list[Delivery]:
    with transaction.atomic():
        return publish_event(
            organization_id=hooks.organization.id,
            server_id="srv_e2e",
            server_name="End to end",
            event=Event.SERVER_STOPPED,
            data={"previous_state": "stopping"},
        )


def test_a_published_event_arrives_signed(
    hooks: Hooks, receiver: HttpsReceiver, cluster: Cluster
) -> None:
    webhooks = [hooks.webhook("/a"), hooks.webhook("/b")]
    cluster()

    deliveries = publish(hooks)

    wait_for(lambda: len(receiver.requests) == 2, timeout=30)
    for webhook in webhooks:
        (request,) = [
            r for r in receiver.requests if r.path == webhook.url.split(str(receiver.port))[1]
        ]
        timestamp = request.header("X-Webhook-Timestamp") or ""
        assert request.header("X-Webhook-Signature") == expected_signature(
            hooks.secrets[webhook.id], timestamp, request.body
        )
    wait_for(
        lambda: Delivery.objects.filter(status=DeliveryStatus.SUCCESS).count() == 2, timeout=10
    )
    assert {d.id for d in deliveries} == {r.header("X-Webhook-Delivery") for r in receiver.requests}


def test_a_delivery_survives_its_worker_being_killed_mid_attempt(
    hooks: Hooks, receiver: HttpsReceiver, cluster: Cluster, settings: Any
) -> None:
    receiver.set_behaviour(path="/slow", delay=3.0)
    hooks.webhook("/slow")
    first = cluster()

    (delivery,) = publish(hooks)
    wait_for(lambda: len(requests_for(receiver, delivery.id)) == 1, timeout=30)
    stop_cluster(first)  # mid-attempt: the receiver is still "thinking"
    assert Delivery.objects.get(pk=delivery.pk).lease_expires_at is not None
    cluster()

    # The new cluster's timer retakes the row once its lease expires (timeout 5 s + margin 1 s).
    wait_for(lambda: len(requests_for(receiver, delivery.id)) == 2, timeout=60)
    wait_for(lambda: Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.SUCCESS)
    (attempt,) = DeliveryAttempt.objects.filter(delivery_id=delivery.pk)
    assert (attempt.number, attempt.status_code, attempt.trigger) == (1, 200, "automatic")
