"""Shared set-up for the webhook API, publish and panel tests: keys holding the webhook scopes,
webhooks made through the service, and delivery rows with attempts made directly.

The fixtures are registered for tests/webhooks/ by its conftest.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import Membership, Organization
from audit.actors import Actor
from tests.conftest import API, IssuedKey, KeyMaker, client_for
from webhooks.events import Event
from webhooks.models import AttemptTrigger, Delivery, DeliveryAttempt, DeliveryStatus, Webhook
from webhooks.payloads import event_body
from webhooks.services import webhook_create

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


WEBHOOK_SCOPES = ["webhooks:read", "webhooks:write", "webhooks:manage"]
URL = "https://hooks.example.com/gshost"
HOOKS = f"{API}/webhooks"


@pytest.fixture(name="admin_key")
def admin_key_fixture(make_key: KeyMaker) -> IssuedKey:
    """Alice's key holding all three webhook scopes."""
    return make_key(WEBHOOK_SCOPES)


@pytest.fixture(name="admin")
def admin_fixture(admin_key: IssuedKey) -> APIClient:
    return client_for(admin_key)


@pytest.fixture(name="outsider")
def outsider_fixture(make_key: KeyMaker, charlie: Membership) -> APIClient:
    """Charlie (Globex) with every webhook scope: Acme's webhooks must not exist for him."""
    return client_for(make_key(WEBHOOK_SCOPES, membership=charlie))


@pytest.fixture(name="webhook")
def webhook_fixture(acme: Organization) -> Webhook:
    """Acme's webhook for server.started and server.crashed."""
    webhook, _ = webhook_create(
        organization=acme,
        url=URL,
        events=[Event.SERVER_STARTED, Event.SERVER_CRASHED],
        actor=TEST_ACTOR,
    )
    return webhook


def create(client: APIClient, **fields: Any) -> Any:
    """POST /webhooks with a valid body, `fields` overriding it."""
    body = {"url": URL, "events": ["server.started"], **fields}
    return client.post(HOOKS, body, format="json")


def make_delivery(
    webhook: Webhook,
    *,
    event: Event = Event.SERVER_CRASHED,
    status: DeliveryStatus = DeliveryStatus.PENDING,
    server_id: str = "srv_0000000000000000000A",
    created_at: datetime | None = None,
    **fields: Any,
) -> Delivery:
    created_at = created_at or timezone.now()
    delivery = Delivery(
        webhook=webhook,
        organization_id=webhook.organization_id,
        event=event.value,
        server_id=server_id,
        status=status,
        created_at=created_at,
        **fields,
    )
    delivery.body = event_body(
        event=event,
        occurred_at=created_at,
        server_id=server_id,
        server_name="Survival",
        data={"reason": "exited", "exit_code": 137},
        delivery_id=delivery.id,
    )
    delivery.save(force_insert=True)
    return delivery


def add_attempt(delivery: Delivery, number: int, **fields: Any) -> DeliveryAttempt:
    values: dict[str, Any] = {
        "trigger": AttemptTrigger.AUTOMATIC,
        "started_at": delivery.created_at + timedelta(minutes=number),
        "duration_ms": 40 * number,
        "status_code": 503,
        "response_body": "busy",
        "request_headers": {"X-Webhook-Delivery": delivery.id},
        "response_headers": {"Retry-After": "60"},
        **fields,
    }
    return DeliveryAttempt.objects.create(delivery=delivery, number=number, **values)
