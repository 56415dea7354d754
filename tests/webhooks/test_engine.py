"""The delivery engine on one thread (``deliver_due_now``) against a real local HTTPS receiver."""

from __future__ import annotations

import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
import trustme
from django.utils import timezone
from freezegun import freeze_time

from tests.webhooks.delivery_fixtures import (
    HOST,
    FlippingResolver,
    Hooks,
    deliver_due_now,
    expected_signature,
    reload,
    use_resolver,
)
from tests.webhooks.receiver import HttpsReceiver
from webhooks.delivery import claims
from webhooks.delivery.engine import send_delivery
from webhooks.delivery.record import Finished, record_attempts
from webhooks.models import DeliveryAttempt, DeliveryStatus, Webhook, WebhookStatus

SPEC_HEADERS = [
    "Host",
    "Content-Type",
    "X-Webhook-Signature",
    "X-Webhook-Timestamp",
    "User-Agent",
    "X-Webhook-Event",
    "X-Webhook-Delivery",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "Content-Length",
]


def test_it_sends_the_stored_body_signed_with_exactly_the_spec_headers(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    webhook = hooks.webhook()
    delivery = hooks.delivery(webhook)

    assert deliver_due_now() == 1

    (request,) = receiver.requests
    assert request.method == "POST" and request.path == "/hook"
    assert request.server_name == HOST
    assert [name for name, _ in request.headers] == SPEC_HEADERS
    assert request.body == delivery.body.encode("utf-8")
    assert request.header("Host") == f"{HOST}:{receiver.port}"
    assert request.header("Content-Type") == "application/json"
    assert request.header("User-Agent") == "Service-Webhooks/1"
    assert request.header("X-Webhook-Event") == "server.crashed"
    assert request.header("X-Webhook-Delivery") == delivery.id
    timestamp = request.header("X-Webhook-Timestamp") or ""
    assert abs(int(timestamp) - timezone.now().timestamp()) < 5
    secret = hooks.secrets[webhook.id]
    assert request.header("X-Webhook-Signature") == expected_signature(
        secret, timestamp, request.body
    )


def test_it_marks_a_2xx_answer_success_and_records_the_attempt(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    receiver.set_behaviour(status=204, headers={"X-Receiver": "yes"})
    delivery = hooks.delivery(hooks.webhook())

    deliver_due_now()

    delivery = reload(delivery)
    assert (delivery.status, delivery.next_attempt_at) == (DeliveryStatus.SUCCESS, None)
    assert (delivery.automatic_attempts, delivery.lease_expires_at) == (1, None)
    (attempt,) = DeliveryAttempt.objects.filter(delivery=delivery)
    assert (attempt.number, attempt.trigger, attempt.status_code, attempt.error) == (
        1,
        "automatic",
        204,
        "",
    )
    assert attempt.request_headers == dict(receiver.requests[0].headers)
    assert attempt.response_headers["X-Receiver"] == "yes"
    assert attempt.duration_ms >= 0


def test_it_stores_at_most_16_kib_of_the_response_body(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    receiver.set_behaviour(status=500, body=b"e" * 40_000)
    delivery = hooks.delivery(hooks.webhook())

    deliver_due_now()

    attempt = DeliveryAttempt.objects.get(delivery=delivery)
    assert attempt.response_body == "e" * 16 * 1024


def test_it_follows_the_retry_plan_then_fails_leaving_the_webhook_active(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    receiver.set_behaviour(status=500)
    with freeze_time("2026-11-22 10:00:00") as clock:
        webhook = hooks.webhook()
        delivery = hooks.delivery(webhook)
        for number, delay in enumerate([60, 300, 1800, 7200, 21600], start=1):
            assert deliver_due_now() == 1
            delivery = reload(delivery)
            assert delivery.status == DeliveryStatus.RETRY_SCHEDULED
            assert delivery.automatic_attempts == number
            assert delivery.next_attempt_at == timezone.now() + timedelta(seconds=delay)
            assert delivery.last_error == "status_500"
            clock.tick(delay - 1)
            assert deliver_due_now() == 0  # not due yet
            clock.tick(1)
        assert deliver_due_now() == 1

    delivery = reload(delivery)
    assert (delivery.status, delivery.next_attempt_at) == (DeliveryStatus.FAILED, None)
    assert delivery.automatic_attempts == 6
    numbers = list(DeliveryAttempt.objects.filter(delivery=delivery).values_list("number"))
    assert numbers == [(n,) for n in range(1, 7)]
    assert len(receiver.requests) == 6
    assert Webhook.objects.get(pk=webhook.pk).status == WebhookStatus.ACTIVE


def test_it_uses_the_configured_retry_delays(
    hooks: Hooks, receiver: HttpsReceiver, settings: object
) -> None:
    settings.WEBHOOK_RETRY_DELAYS = [5]  # type: ignore[attr-defined]
    receiver.set_behaviour(status=503)
    with freeze_time("2026-11-22 10:00:00") as clock:
        delivery = hooks.delivery(hooks.webhook())
        deliver_due_now()
        assert reload(delivery).next_attempt_at == timezone.now() + timedelta(seconds=5)
        clock.tick(5)
        deliver_due_now()

    assert reload(delivery).status == DeliveryStatus.FAILED


def test_it_treats_a_redirect_as_a_failure_without_following_it(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    receiver.set_behaviour(path="/hook", redirect_to=hooks.url("/elsewhere"))
    delivery = hooks.delivery(hooks.webhook())

    deliver_due_now()

    attempt = DeliveryAttempt.objects.get(delivery=delivery)
    assert (attempt.status_code, attempt.error) == (302, "redirect")
    assert reload(delivery).status == DeliveryStatus.RETRY_SCHEDULED
    assert [request.path for request in receiver.requests] == ["/hook"]


def test_it_times_out_a_receiver_that_never_answers(
    hooks: Hooks, receiver: HttpsReceiver, settings: object
) -> None:
    settings.WEBHOOK_TIMEOUT_SECONDS = 1.0  # type: ignore[attr-defined]
    receiver.set_behaviour(hang=True)
    delivery = hooks.delivery(hooks.webhook())

    deliver_due_now()

    attempt = DeliveryAttempt.objects.get(delivery=delivery)
    assert (attempt.error, attempt.status_code) == ("timeout", None)
    assert 900 <= attempt.duration_ms < 3000
    assert reload(delivery).status == DeliveryStatus.RETRY_SCHEDULED


def test_it_times_out_a_receiver_that_trickles_its_body(
    hooks: Hooks, receiver: HttpsReceiver, settings: object
) -> None:
    settings.WEBHOOK_TIMEOUT_SECONDS = 1.0  # type: ignore[attr-defined]
    receiver.set_behaviour(body=b"x" * 100, trickle_interval=0.05)  # 5 s in all
    delivery = hooks.delivery(hooks.webhook())

    deliver_due_now()

    attempt = DeliveryAttempt.objects.get(delivery=delivery)
    assert attempt.error == "timeout"
    assert attempt.duration_ms < 3000


def test_it_reports_a_tls_error_for_an_untrusted_certificate(
    hooks: Hooks, receiver: HttpsReceiver, settings: object, tmp_path: object
) -> None:
    other_ca = trustme.CA()
    other_pem = f"{tmp_path}/other-ca.pem"
    other_ca.cert_pem.write_to_path(other_pem)
    settings.WEBHOOK_CA_BUNDLE = other_pem  # type: ignore[attr-defined]
    delivery = hooks.delivery(hooks.webhook())

    deliver_due_now()

    attempt = DeliveryAttempt.objects.get(delivery=delivery)
    assert (attempt.error, attempt.status_code) == ("tls_error", None)
    assert reload(delivery).status == DeliveryStatus.RETRY_SCHEDULED
    assert receiver.requests == []


def test_it_fails_at_once_when_the_url_no_longer_passes_the_address_check(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    webhook = hooks.webhook()
    delivery = hooks.delivery(webhook)
    Webhook.objects.filter(pk=webhook.pk).update(url=f"https://10.0.0.5:{receiver.port}/hook")

    deliver_due_now()

    delivery = reload(delivery)
    assert (delivery.status, delivery.next_attempt_at) == (DeliveryStatus.FAILED, None)
    assert delivery.last_error == "address_rejected"
    attempt = DeliveryAttempt.objects.get(delivery=delivery)
    assert (attempt.error, attempt.status_code, attempt.request_headers) == (
        "address_rejected",
        None,
        {},
    )
    assert receiver.requests == []


def test_it_fails_at_once_when_the_name_resolves_to_a_private_address_at_send_time(
    hooks: Hooks,
    receiver: HttpsReceiver,
    settings: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.WEBHOOK_ALLOWED_NETWORKS = []  # type: ignore[attr-defined]
    resolver = FlippingResolver()
    use_resolver(monkeypatch, resolver)
    assert [str(ip) for ip in resolver(HOST, receiver.port)] == ["93.184.216.34"]  # registration
    delivery = hooks.delivery(hooks.webhook())

    deliver_due_now()

    delivery = reload(delivery)
    assert (delivery.status, delivery.next_attempt_at) == (DeliveryStatus.FAILED, None)
    assert DeliveryAttempt.objects.get(delivery=delivery).error == "address_rejected"
    assert resolver.calls == 2
    assert receiver.requests == []
    assert receiver.connections_accepted == 0


def test_it_fails_at_once_without_a_usable_signing_secret(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    webhook = hooks.webhook()
    Webhook.objects.filter(pk=webhook.pk).update(encrypted_secret="not-a-fernet-token")
    delivery = hooks.delivery(webhook)

    deliver_due_now()

    delivery = reload(delivery)
    assert (delivery.status, delivery.next_attempt_at) == (DeliveryStatus.FAILED, None)
    assert DeliveryAttempt.objects.get(delivery=delivery).error == "signing_secret_unusable"
    assert receiver.requests == []


def test_a_successful_redelivery_settles_the_delivery_and_cancels_its_retries(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    receiver.set_behaviour(status=500)
    with freeze_time("2026-11-22 10:00:00") as clock:
        webhook = hooks.webhook()
        delivery = hooks.delivery(webhook)
        deliver_due_now()
        receiver.set_behaviour(status=200)
        clock.tick(10)
        delivery.__class__.objects.filter(pk=delivery.pk).update(
            redelivery_requested_at=timezone.now()
        )
        assert deliver_due_now() == 1

    delivery = reload(delivery)
    assert (delivery.status, delivery.next_attempt_at) == (DeliveryStatus.SUCCESS, None)
    assert delivery.redelivery_requested_at is None
    assert delivery.automatic_attempts == 1
    first, second = receiver.requests
    assert second.body == first.body
    assert second.header("X-Webhook-Delivery") == first.header("X-Webhook-Delivery")
    assert (
        int(second.header("X-Webhook-Timestamp") or 0)
        == int(first.header("X-Webhook-Timestamp") or 0) + 10
    )
    assert second.header("X-Webhook-Signature") == expected_signature(
        hooks.secrets[webhook.id], second.header("X-Webhook-Timestamp") or "", second.body
    )
    attempts = DeliveryAttempt.objects.filter(delivery=delivery).order_by("number")
    assert [(a.number, a.trigger) for a in attempts] == [(1, "automatic"), (2, "redelivery")]


def test_a_failed_redelivery_leaves_the_retry_plan_as_it_was(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    receiver.set_behaviour(status=500)
    with freeze_time("2026-11-22 10:00:00") as clock:
        delivery = hooks.delivery(hooks.webhook())
        deliver_due_now()
        before = reload(delivery)
        clock.tick(10)
        delivery.__class__.objects.filter(pk=delivery.pk).update(
            redelivery_requested_at=timezone.now()
        )
        assert deliver_due_now() == 1

    after = reload(delivery)
    assert (after.status, after.next_attempt_at, after.automatic_attempts) == (
        before.status,
        before.next_attempt_at,
        before.automatic_attempts,
    )
    assert after.redelivery_requested_at is None
    redelivery = DeliveryAttempt.objects.get(delivery=delivery, number=2)
    assert (redelivery.trigger, redelivery.status_code) == ("redelivery", 500)


def test_a_redelivery_of_a_failed_delivery_can_settle_it(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    delivery = hooks.delivery(
        hooks.webhook(),
        status=DeliveryStatus.FAILED,
        next_attempt_at=None,
        automatic_attempts=6,
        redelivery_requested_at=timezone.now(),
    )

    deliver_due_now()

    delivery = reload(delivery)
    assert (delivery.status, delivery.automatic_attempts) == (DeliveryStatus.SUCCESS, 6)


def test_a_redelivery_asked_for_during_an_attempt_is_kept(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    delivery = hooks.delivery(hooks.webhook(), redelivery_requested_at=timezone.now())
    (claim,) = claims.claim_due(1)
    newer = timezone.now() + timedelta(seconds=1)
    delivery.__class__.objects.filter(pk=delivery.pk).update(redelivery_requested_at=newer)

    record_attempts([Finished(claim, send_delivery(claim))])

    assert reload(delivery).redelivery_requested_at == newer
    assert [claim.delivery_id for claim in claims.claim_due(1)] == [delivery.id]


def test_a_delivery_whose_worker_died_is_attempted_again_after_its_lease(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    with freeze_time("2026-11-22 10:00:00") as clock:
        delivery = hooks.delivery(hooks.webhook())
        (claim,) = claims.claim_due(1)  # the worker dies holding it
        lease = (claim.lease_expires_at - timezone.now()).total_seconds()
        assert lease == pytest.approx(claims.lease_duration().total_seconds(), abs=0.001)
        clock.tick(lease - 1)
        assert deliver_due_now() == 0
        clock.tick(2)
        assert deliver_due_now() == 1

    delivery = reload(delivery)
    assert (delivery.status, delivery.lease_expires_at) == (DeliveryStatus.SUCCESS, None)
    assert len(receiver.requests) == 1


def test_a_claimed_row_cannot_be_claimed_again(hooks: Hooks) -> None:
    delivery = hooks.delivery(hooks.webhook())

    first = claims.claim_due(5)
    second = claims.claim_due(5)

    assert [claim.delivery_id for claim in first] == [delivery.id]
    assert second == []


def test_a_late_result_after_losing_the_lease_is_recorded_but_moves_nothing(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    with freeze_time("2026-11-22 10:00:00") as clock:
        delivery = hooks.delivery(hooks.webhook())
        (stale,) = claims.claim_due(1)
        clock.tick(60)
        (current,) = claims.claim_due(1)
        receiver.set_behaviour(status=500)

        record_attempts([Finished(stale, send_delivery(stale))])

    delivery = reload(delivery)
    assert (delivery.status, delivery.automatic_attempts) == (DeliveryStatus.PENDING, 0)
    assert delivery.lease_expires_at == current.lease_expires_at
    assert DeliveryAttempt.objects.filter(delivery=delivery).count() == 1


def test_it_skips_rows_that_are_not_due(hooks: Hooks) -> None:
    webhook = hooks.webhook()
    hooks.delivery(webhook, next_attempt_at=timezone.now() + timedelta(seconds=30))
    hooks.delivery(webhook, status=DeliveryStatus.SUCCESS)
    hooks.delivery(webhook, status=DeliveryStatus.FAILED)

    assert deliver_due_now() == 0


@pytest.mark.parametrize("by_id", [True, False], ids=["named rows", "the due scan"])
def test_a_claim_takes_exactly_the_due_rows(hooks: Hooks, by_id: bool) -> None:
    now = timezone.now()
    webhook = hooks.webhook()
    due = [
        hooks.delivery(webhook),
        hooks.delivery(webhook, status=DeliveryStatus.RETRY_SCHEDULED),
        hooks.delivery(webhook, lease_expires_at=now - timedelta(seconds=1)),
        hooks.delivery(webhook, status=DeliveryStatus.FAILED, redelivery_requested_at=now),
    ]
    not_due = [
        hooks.delivery(webhook, next_attempt_at=now + timedelta(seconds=30)),
        hooks.delivery(webhook, status=DeliveryStatus.SUCCESS),
        hooks.delivery(webhook, status=DeliveryStatus.FAILED),
        hooks.delivery(webhook, lease_expires_at=now + timedelta(seconds=30)),
        hooks.delivery(
            webhook, redelivery_requested_at=now, lease_expires_at=now + timedelta(seconds=30)
        ),
    ]
    every_id = [delivery.id for delivery in due + not_due]
    expected = sorted(delivery.id for delivery in due)

    taken = claims.claim_due(20, ids=every_id if by_id else None)

    assert sorted(claim.delivery_id for claim in taken) == expected


class DroppingServer:
    """Reads each request; closes the first ``drops`` connections without answering (after
    ``delay`` seconds), as a receiver closing an idle keep-alive connection does; answers 200
    on later connections."""

    def __init__(self, drops: int, delay: float = 0.0) -> None:
        self.ca = trustme.CA()
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert(HOST).configure_cert(self.context)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.drops, self.delay, self.requests = drops, delay, 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            with self.context.wrap_socket(raw, server_side=True) as conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                # Read the body too: closing with unread bytes sends a reset, which could
                # reach the client before the 200 does.
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length: *(\d+)", head)[1])  # type: ignore[index]
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests += 1
                if self.requests <= self.drops:
                    time.sleep(self.delay)
                    continue
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def dropping_server(settings: object, tmp_path: object) -> Iterator[Callable[..., DroppingServer]]:
    servers: list[DroppingServer] = []

    def make(drops: int, delay: float = 0.0) -> DroppingServer:
        server = DroppingServer(drops, delay)
        pem = f"{tmp_path}/dropping-{len(servers)}.pem"
        server.ca.cert_pem.write_to_path(pem)
        settings.WEBHOOK_CA_BUNDLE = pem  # type: ignore[attr-defined]
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def test_a_connection_closed_without_an_answer_is_tried_once_more_at_once(
    hooks: Hooks, dropping_server: Callable[..., DroppingServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # "At once" is under a second in production; a loaded CI machine gets more headroom.
    monkeypatch.setattr("webhooks.targets.transport.STALE_CONNECTION_SECONDS", 5.0)
    server = dropping_server(drops=1)
    delivery = hooks.delivery(hooks.webhook(url=f"https://{HOST}:{server.port}/hook"))

    deliver_due_now()

    assert reload(delivery).status == DeliveryStatus.SUCCESS
    assert server.requests == 2
    assert DeliveryAttempt.objects.get(delivery=delivery).status_code == 200


def test_a_slow_connection_failure_is_not_repeated(
    hooks: Hooks, dropping_server: Callable[..., DroppingServer]
) -> None:
    server = dropping_server(drops=2, delay=1.2)
    delivery = hooks.delivery(hooks.webhook(url=f"https://{HOST}:{server.port}/hook"))

    deliver_due_now()

    assert reload(delivery).status == DeliveryStatus.RETRY_SCHEDULED
    assert DeliveryAttempt.objects.get(delivery=delivery).error == "connection_error"
    assert server.requests == 1
