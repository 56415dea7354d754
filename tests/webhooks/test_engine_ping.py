"""The synchronous test ping, against a real local HTTPS receiver."""

from __future__ import annotations

import json
import re

from freezegun import freeze_time

from tests.webhooks.delivery_fixtures import (
    Hooks,
    expected_signature,
)
from tests.webhooks.receiver import HttpsReceiver
from webhooks.models import Delivery, DeliveryAttempt, Webhook
from webhooks.targets.signed import send_ping


def test_it_sends_a_signed_ping_without_event_or_delivery_headers(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    webhook = hooks.webhook()

    result = send_ping(webhook)

    assert result.succeeded and result.status_code == 200 and result.error is None
    (request,) = receiver.requests
    assert [name for name, _ in request.headers] == [
        "Host",
        "Content-Type",
        "X-Webhook-Signature",
        "X-Webhook-Timestamp",
        "User-Agent",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "Content-Length",
    ]
    assert request.header("User-Agent") == "Service-Webhooks/1"
    timestamp = request.header("X-Webhook-Timestamp") or ""
    assert request.header("X-Webhook-Signature") == expected_signature(
        hooks.secrets[webhook.id], timestamp, request.body
    )
    assert result.request_headers == dict(request.headers)


def test_its_body_is_compact_json_naming_the_webhook(hooks: Hooks, receiver: HttpsReceiver) -> None:
    webhook = hooks.webhook()

    with freeze_time("2026-11-22 10:00:00.123456"):
        send_ping(webhook)

    body = receiver.requests[0].body
    assert body == (
        b'{"type":"ping","webhook_id":"' + webhook.id.encode() + b'",'
        b'"occurred_at":"2026-11-22T10:00:00.123Z"}'
    )
    assert re.fullmatch(r"whk_\w+", json.loads(body)["webhook_id"])


def test_it_reports_a_failing_answer_without_retrying_or_storing_anything(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    receiver.set_behaviour(status=503, body=b"down")

    result = send_ping(hooks.webhook())

    assert (result.succeeded, result.status_code, result.response_body) == (False, 503, "down")
    assert len(receiver.requests) == 1
    assert not Delivery.objects.exists() and not DeliveryAttempt.objects.exists()


def test_it_refuses_a_url_failing_the_address_check_without_sending(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    webhook = hooks.webhook(url=f"https://127.0.0.1:{receiver.port}/hook")

    result = send_ping(webhook)

    assert (result.error, result.status_code, result.request_headers) == (
        "address_rejected",
        None,
        {},
    )
    assert receiver.connections_accepted == 0


def test_it_refuses_to_send_without_a_usable_secret(hooks: Hooks, receiver: HttpsReceiver) -> None:
    webhook = hooks.webhook()
    Webhook.objects.filter(pk=webhook.pk).update(encrypted_secret="gAAAAA-broken")
    webhook.refresh_from_db()

    result = send_ping(webhook)

    assert result.error == "signing_secret_unusable"
    assert receiver.connections_accepted == 0
