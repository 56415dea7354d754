"""Receivers using only the official `standardwebhooks` library verify every kind of request
the engine sends (delivery, redelivery, test ping), across a secret roll's grace period; and a
real worker's deliveries verify too. The library takes our secret's UTF-8 bytes as its key."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from freezegun import freeze_time
from standardwebhooks import Webhook as StandardWebhook
from standardwebhooks import WebhookVerificationError

from audit.actors import Actor
from gshost.schedules import ensure_schedules
from tests.webhooks.delivery_fixtures import Hooks, deliver_due_now, expected_signature, wait_for
from tests.webhooks.receiver import HttpsReceiver, ReceivedRequest
from tests.webhooks.worker_cluster import (
    needs_postgres_and_redis,
    purge_queued_tasks,
    start_cluster,
    stop_cluster,
)
from webhooks.events import Event
from webhooks.services import publish_event, webhook_roll_secret
from webhooks.targets.signed import send_ping

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


ROLLED_AT = "2026-11-22T10:00:00Z"


def verify(secret: str, request: ReceivedRequest) -> Any:
    headers = {name: value for name, value in request.headers}
    return StandardWebhook(secret.encode("utf-8")).verify(request.body, headers)


def legacy_verifies(secret: str, request: ReceivedRequest) -> bool:
    timestamp = request.header("X-Webhook-Timestamp") or ""
    signature = expected_signature(secret, timestamp, request.body)
    return request.header("X-Webhook-Signature") == signature


def only_request(receiver: HttpsReceiver) -> ReceivedRequest:
    (request,) = receiver.requests
    receiver.requests.clear()
    return request


def test_it_verifies_a_delivery(hooks: Hooks, receiver: HttpsReceiver) -> None:
    webhook = hooks.webhook()
    delivery = hooks.delivery(webhook)
    deliver_due_now()
    request = only_request(receiver)
    assert verify(hooks.secrets[webhook.id], request)["delivery_id"] == delivery.id
    assert request.header("webhook-id") == delivery.id
    assert request.header("webhook-timestamp") == request.header("X-Webhook-Timestamp")


def test_it_fails_a_tampered_delivery(hooks: Hooks, receiver: HttpsReceiver) -> None:
    webhook = hooks.webhook()
    hooks.delivery(webhook)
    deliver_due_now()
    request = only_request(receiver)
    tampered = replace(request, body=request.body.replace(b"137", b"138"))
    with pytest.raises(WebhookVerificationError):
        verify(hooks.secrets[webhook.id], tampered)


def test_it_verifies_a_redelivery(hooks: Hooks, receiver: HttpsReceiver) -> None:
    webhook = hooks.webhook()
    delivery = hooks.delivery(webhook)
    deliver_due_now()
    first = only_request(receiver)
    type(delivery).objects.filter(pk=delivery.pk).update(redelivery_requested_at=timezone.now())
    deliver_due_now()
    again = only_request(receiver)
    assert verify(hooks.secrets[webhook.id], again)["delivery_id"] == delivery.id
    assert again.header("webhook-id") == first.header("webhook-id") == delivery.id


def test_it_verifies_a_test_ping_with_its_own_id(hooks: Hooks, receiver: HttpsReceiver) -> None:
    webhook = hooks.webhook()
    send_ping(webhook)
    request = only_request(receiver)
    assert verify(hooks.secrets[webhook.id], request)["type"] == "ping"
    assert (request.header("webhook-id") or "").startswith("png_")


@pytest.fixture(name="rolled")
def rolled_fixture(hooks: Hooks) -> Iterator[tuple[Any, str, str]]:
    """A webhook whose secret was rolled at ROLLED_AT with a 24-hour grace period."""
    webhook = hooks.webhook()
    old = hooks.secrets[webhook.id]
    with freeze_time(ROLLED_AT):
        webhook, new = webhook_roll_secret(webhook=webhook, grace_hours=24, actor=TEST_ACTOR)
    yield webhook, old, new


def test_it_verifies_with_both_secrets_during_the_grace(
    hooks: Hooks, receiver: HttpsReceiver, rolled: tuple[Any, str, str]
) -> None:
    webhook, old, new = rolled
    with freeze_time("2026-11-23T09:59:00Z"):
        hooks.delivery(webhook, next_attempt_at=timezone.now())
        deliver_due_now()
        request = only_request(receiver)
        verify(new, request)
        verify(old, request)
    assert len((request.header("webhook-signature") or "").split(" ")) == 2


def test_it_keeps_the_legacy_signature_on_the_old_secret_during_the_grace(
    hooks: Hooks, receiver: HttpsReceiver, rolled: tuple[Any, str, str]
) -> None:
    webhook, old, new = rolled
    with freeze_time("2026-11-23T09:59:00Z"):
        hooks.delivery(webhook, next_attempt_at=timezone.now())
        deliver_due_now()
    request = only_request(receiver)
    assert legacy_verifies(old, request)
    assert not legacy_verifies(new, request)


def test_it_signs_with_the_new_secret_alone_after_the_grace(
    hooks: Hooks, receiver: HttpsReceiver, rolled: tuple[Any, str, str]
) -> None:
    webhook, old, new = rolled
    with freeze_time("2026-11-23T10:00:01Z"):
        hooks.delivery(webhook, next_attempt_at=timezone.now())
        deliver_due_now()
        request = only_request(receiver)
        verify(new, request)
        with pytest.raises(WebhookVerificationError):
            verify(old, request)
    assert legacy_verifies(new, request)


def test_it_signs_test_pings_with_both_secrets_during_the_grace(
    hooks: Hooks, receiver: HttpsReceiver, rolled: tuple[Any, str, str]
) -> None:
    webhook, old, new = rolled
    with freeze_time("2026-11-22T11:00:00Z"):
        send_ping(webhook)
        request = only_request(receiver)
        verify(new, request)
        verify(old, request)


# --- the real worker ---------------------------------------------------------------------------


Cluster = Callable[[], subprocess.Popen[bytes]]


@pytest.fixture(name="cluster")
def cluster_fixture(receiver: HttpsReceiver, tmp_path: Path) -> Iterator[Cluster]:
    purge_queued_tasks()
    ensure_schedules()
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        process = start_cluster(
            receiver, tmp_path / "qcluster.log", WEBHOOK_TIMEOUT_SECONDS="5", Q_WORKERS="2"
        )
        started.append(process)
        return process

    yield start
    for process in started:
        stop_cluster(process)


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
@needs_postgres_and_redis
def test_a_real_workers_deliveries_verify_with_the_library_and_tampering_fails(
    hooks: Hooks, receiver: HttpsReceiver, cluster: Cluster
) -> None:
    webhook = hooks.webhook()
    cluster()
    with transaction.atomic():
        (delivery,) = publish_event(
            organization_id=hooks.organization.id,
            server_id="srv_e2e",
            server_name="End to end",
            event=Event.SERVER_STOPPED,
            data={"previous_state": "stopping"},
        )
    wait_for(lambda: len(receiver.requests) == 1, timeout=30)
    (request,) = receiver.requests
    assert verify(hooks.secrets[webhook.id], request)["delivery_id"] == delivery.id
    tampered = replace(request, body=request.body.replace(b"stopping", b"starting"))
    with pytest.raises(WebhookVerificationError):
        verify(hooks.secrets[webhook.id], tampered)
