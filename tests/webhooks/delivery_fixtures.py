"""Shared set-up for the delivery engine tests: a receiver named like a public host, settings
pointing the engine's sender at it, and rows made directly (pending, due now).

The fixtures are registered for tests/webhooks/ by its conftest.py.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

import pytest
from django.db import OperationalError
from django.utils import timezone

from accounts.models import Organization
from tests.webhooks.receiver import HttpsReceiver, ReceivedRequest, loopback_resolver
from webhooks.delivery import claims
from webhooks.delivery.engine import send_delivery
from webhooks.delivery.record import Finished, record_attempts
from webhooks.events import Event
from webhooks.models import Delivery, Webhook
from webhooks.payloads import render_json
from webhooks.secrets import encrypt_secret, new_signing_secret
from webhooks.targets import client
from webhooks.targets.transport import IPAddress

T = TypeVar("T")
HOST = "hooks.example.com"  # public-looking: check_webhook_url refuses localhost
PUBLIC_IP = ipaddress.ip_address("93.184.216.34")


def use_resolver(monkeypatch: pytest.MonkeyPatch, resolve: Callable[[str, int], Any]) -> None:
    monkeypatch.setattr(client, "sender_factory", partial(client.build_sender, resolve=resolve))


@pytest.fixture(name="receiver")
def receiver_fixture() -> Iterator[HttpsReceiver]:
    with HttpsReceiver(names=(HOST,)) as started:
        yield started


@pytest.fixture(name="engine_settings")
def engine_settings_fixture(
    settings: Any, receiver: HttpsReceiver, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """The engine trusts the receiver's CA, may reach loopback, and resolves HOST to it."""
    settings.WEBHOOK_CA_BUNDLE = receiver.ca_pem_path
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.WEBHOOK_TIMEOUT_SECONDS = 5.0
    settings.WEBHOOK_RETRY_DELAYS = [60, 300, 1800, 7200, 21600]
    use_resolver(monkeypatch, loopback_resolver)
    return settings  # the suite's one process-state fixture stops the engine afterwards


class Hooks:
    """Makes webhooks and deliveries; remembers each webhook's plaintext secret."""

    def __init__(self, organization: Organization, receiver: HttpsReceiver) -> None:
        self.organization = organization
        self.receiver = receiver
        self.secrets: dict[str, str] = {}

    def url(self, path: str = "/hook") -> str:
        return f"https://{HOST}:{self.receiver.port}{path}"

    def webhook(self, path: str = "/hook", *, url: str | None = None) -> Webhook:
        secret = new_signing_secret()
        webhook = Webhook(
            organization=self.organization,
            url=url or self.url(path),
            events=[event.value for event in Event],
            encrypted_secret=encrypt_secret(secret),
        )
        retrying_locked(lambda: webhook.save(force_insert=True))
        self.secrets[webhook.id] = secret
        return webhook

    def delivery(
        self, webhook: Webhook, *, event: Event = Event.SERVER_CRASHED, **fields: Any
    ) -> Delivery:
        delivery = Delivery(
            webhook=webhook,
            organization=self.organization,
            event=event.value,
            server_id="srv_test",
            next_attempt_at=fields.pop("next_attempt_at", timezone.now()),
            **fields,
        )
        delivery.body = render_json(
            {
                "event": event.value,
                "occurred_at": "2026-11-22T03:00:00.000Z",
                "server": {"id": "srv_test", "name": "Überleben"},
                "data": {"reason": "exited", "exit_code": 137},
                "delivery_id": delivery.id,
            }
        )
        retrying_locked(delivery.save)
        return delivery


@pytest.fixture(name="hooks")
def hooks_fixture(acme: Organization, receiver: HttpsReceiver, engine_settings: Any) -> Hooks:
    return Hooks(acme, receiver)


def expected_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Computed here from the documented rule, independently of webhooks.signing."""
    message = timestamp.encode() + b"." + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def retrying_locked(action: Callable[[], T]) -> T:
    """Run ``action``, again while SQLite says "table is locked".

    The in-memory test database is shared between threads in SQLite's shared-cache mode,
    where a concurrent writer makes others fail at once instead of waiting (a WAL file with a
    busy timeout, as the service uses, waits). PostgreSQL never raises this.
    """
    for _ in range(200):
        try:
            return action()
        except OperationalError as error:
            if "locked" not in str(error):
                raise
            time.sleep(0.01)
    return action()


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not retrying_locked(condition):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def requests_for(receiver: HttpsReceiver, delivery_id: str) -> list[ReceivedRequest]:
    return [r for r in receiver.requests if r.header("X-Webhook-Delivery") == delivery_id]


def reload(delivery: Delivery) -> Delivery:
    return Delivery.objects.get(pk=delivery.pk)


class FlippingResolver:
    """Answers a public address first (as at registration), loopback afterwards."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.calls += 1
        return [PUBLIC_IP] if self.calls == 1 else [ipaddress.ip_address("127.0.0.1")]


def deliver_due_now() -> int:
    """Claim what is due and attempt it on this thread, one row at a time, as a sender does;
    the number of attempts made."""
    made = 0
    while taken := claims.claim_due(1):
        record_attempts([Finished(taken[0], send_delivery(taken[0]))])
        made += 1
    return made
