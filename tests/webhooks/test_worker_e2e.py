"""End to end: a real ``qcluster`` process on PostgreSQL with the Redis broker.

The worker runs in a subprocess against the test database (rows are committed: transactional
tests), resolving the receiver's public-looking name to loopback. Skipped unless the suite runs
on PostgreSQL with REDIS_URL set.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, transaction
from django_q.brokers import get_broker

from tests.webhooks.delivery_fixtures import (
    Hooks,
    engine_settings_fixture,  # noqa: F401
    expected_signature,
    hooks_fixture,  # noqa: F401
    org_fixture,  # noqa: F401
    receiver_fixture,  # noqa: F401
    requests_for,
    wait_for,
)
from tests.webhooks.receiver import HttpsReceiver
from webhooks.events import Event
from webhooks.models import Delivery, DeliveryAttempt, DeliveryStatus
from webhooks.schedules import ensure_schedules
from webhooks.services import publish_event

ROOT = Path(__file__).resolve().parents[2]
ON_POSTGRES = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not (ON_POSTGRES and settings.REDIS_URL),
        reason="end-to-end worker tests need DATABASE_URL on PostgreSQL and REDIS_URL",
    ),
]

Cluster = Callable[[], subprocess.Popen[bytes]]


def worker_environment(receiver: HttpsReceiver) -> dict[str, str]:
    db = connection.settings_dict
    database_url = (
        f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}"
    )
    return {
        **os.environ,
        "DATABASE_URL": database_url,  # the test database, which these tests commit to
        "REDIS_URL": settings.REDIS_URL,
        "SECRET_KEY": settings.SECRET_KEY,
        "WEBHOOK_SECRET_KEYS": ",".join(settings.WEBHOOK_SECRET_KEYS),
        "WEBHOOK_CA_BUNDLE": receiver.ca_pem_path,
        "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
        "WEBHOOK_TIMEOUT_SECONDS": "5",
        "WEBHOOK_LEASE_MARGIN_SECONDS": "1",
        "Q_WORKERS": "2",
        "LOG_LEVEL": "WARNING",
    }


@pytest.fixture(name="cluster")
def cluster_fixture(receiver: HttpsReceiver, tmp_path: Path) -> Iterator[Cluster]:
    """Starts worker clusters (each in its own process group); stops them afterwards."""
    get_broker().purge_queue()  # tasks other tests queued for rows that are gone
    ensure_schedules()  # transactional tests empty every table, schedules included
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        log = (tmp_path / f"qcluster-{len(started)}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.webhooks.loopback_qcluster"],
            cwd=ROOT, env=worker_environment(receiver), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        started.append(process)
        return process

    yield start
    for process in started:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Kill the cluster outright, workers included (its process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


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
    stop(first)  # mid-attempt: the receiver is still "thinking"
    assert Delivery.objects.get(pk=delivery.pk).lease_expires_at is not None
    cluster()

    # The new cluster's sweep starts at its scheduler's first tick (~30 s) and finds the lease
    # expired (timeout 5 s + margin 1 s).
    wait_for(lambda: len(requests_for(receiver, delivery.id)) == 2, timeout=60)
    wait_for(lambda: Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.SUCCESS)
    (attempt,) = DeliveryAttempt.objects.filter(delivery_id=delivery.pk)
    assert (attempt.number, attempt.status_code, attempt.trigger) == (1, 200, "automatic")
