"""The worker side through its public face: the task that wakes the senders, the engine's
threads, and claims made concurrently. Rows are committed (transactional tests) so the
engine's threads see them."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from tests.webhooks.delivery_fixtures import (
    Hooks,
    requests_for,
    wait_for,
)
from tests.webhooks.receiver import HttpsReceiver
from webhooks import tasks
from webhooks.delivery import claims, engine
from webhooks.models import AttemptError, Delivery, DeliveryAttempt, DeliveryStatus
from webhooks.targets.signed import refused
from webhooks.targets.transport import AttemptResult

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_engine_left_running() -> Iterator[None]:
    """The engine a test starts stops with it: its senders would go on scanning and recording
    (and counting in the metrics) through the tests that follow."""
    yield
    engine.stop_engine()


def settled(*deliveries: Delivery) -> bool:
    ids = [delivery.id for delivery in deliveries]
    open_rows = Delivery.objects.filter(id__in=ids).exclude(lease_expires_at__isnull=False)
    return open_rows.filter(status=DeliveryStatus.SUCCESS).count() == len(ids)


def test_the_task_wakes_the_senders_which_deliver_and_record_the_rows(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    webhooks = [hooks.webhook(f"/hook/{n}") for n in range(5)]
    deliveries = [hooks.delivery(webhooks[n % 5]) for n in range(20)]

    tasks.attempt_deliveries([(d.id, d.webhook_id) for d in deliveries])

    wait_for(lambda: settled(*deliveries))
    assert len(receiver.requests) == 20
    assert DeliveryAttempt.objects.filter(delivery__in=deliveries).count() == 20


def test_a_dead_workers_rows_are_retaken_once_their_lease_runs_out(
    hooks: Hooks, receiver: HttpsReceiver, settings: Any
) -> None:
    settings.WEBHOOK_TIMEOUT_SECONDS = 1.0
    settings.WEBHOOK_LEASE_MARGIN_SECONDS = 0.5
    webhook = hooks.webhook()
    deliveries = [hooks.delivery(webhook) for _ in range(3)]
    held = claims.claim_due(3)  # a worker that is then killed, holding them
    assert len(held) == 3

    engine.get_engine()

    wait_for(lambda: all(requests_for(receiver, d.id) for d in deliveries), timeout=10)
    wait_for(lambda: settled(*deliveries))
    (attempt, *_) = DeliveryAttempt.objects.filter(delivery=deliveries[0])
    assert attempt.started_at >= held[0].lease_expires_at


def test_a_stopped_engine_finishes_and_records_the_attempt_on_the_network(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    receiver.set_behaviour(delay=1.0)
    delivery = hooks.delivery(hooks.webhook())
    tasks.attempt_deliveries([(delivery.id, delivery.webhook_id)])
    wait_for(lambda: len(receiver.requests) == 1)

    engine.stop_engine()

    assert settled(delivery)


def test_an_endpoint_that_does_not_answer_gets_one_attempt_at_a_time(
    hooks: Hooks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an attempt that got no answer, every later attempt starts alone: a dead endpoint
    holds one sender thread, not four, however many of its rows are waiting."""
    lock = threading.Lock()
    on_wire = 0
    failed_once = False
    alone_after_a_failure: list[bool] = []

    def no_answer(claim: claims.Claim) -> AttemptResult:
        nonlocal on_wire, failed_once
        with lock:
            on_wire += 1
            if failed_once:
                alone_after_a_failure.append(on_wire == 1)
        time.sleep(0.05)
        with lock:
            on_wire -= 1
            failed_once = True
        return refused(AttemptError.TIMEOUT)

    monkeypatch.setattr(engine, "send_delivery", no_answer)
    dead = hooks.webhook("/dead")
    deliveries = [hooks.delivery(dead) for _ in range(12)]

    engine.attempt_deliveries([(d.id, d.webhook_id) for d in deliveries])

    wait_for(lambda: len(alone_after_a_failure) >= 6)
    assert all(alone_after_a_failure)


def test_idle_senders_pick_up_due_retries_and_expired_leases_without_a_task(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    webhook = hooks.webhook()
    now = timezone.now()
    retry = hooks.delivery(
        webhook, status=DeliveryStatus.RETRY_SCHEDULED, next_attempt_at=now - timedelta(seconds=1)
    )
    orphan = hooks.delivery(webhook, lease_expires_at=now - timedelta(seconds=1))
    soon = hooks.delivery(
        webhook,
        status=DeliveryStatus.RETRY_SCHEDULED,
        next_attempt_at=now + timedelta(seconds=1.5),
    )
    later = hooks.delivery(webhook, next_attempt_at=now + timedelta(minutes=5))
    held = hooks.delivery(webhook, lease_expires_at=now + timedelta(minutes=1))

    engine.get_engine()  # started, as in a worker; nothing is handed to it

    wait_for(lambda: settled(retry, orphan, soon))
    engine.stop_engine()
    assert settled(retry, orphan, soon)
    assert Delivery.objects.get(pk=later.pk).status == DeliveryStatus.PENDING
    assert Delivery.objects.get(pk=held.pk).status == DeliveryStatus.PENDING
    assert not requests_for(receiver, later.id) and not requests_for(receiver, held.id)
    assert len(requests_for(receiver, soon.id)) == 1  # fell due while the senders idled
    (attempt,) = DeliveryAttempt.objects.filter(delivery=soon)
    assert attempt.started_at >= soon.next_attempt_at  # and not before it was due


def test_two_claimers_never_take_the_same_row(hooks: Hooks) -> None:
    webhook = hooks.webhook()
    ids = [hooks.delivery(webhook).id for _ in range(60)]
    taken: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(3)

    def claimer() -> None:
        try:
            start.wait()
            deadline = time.monotonic() + 5
            while len(taken) < len(ids) and time.monotonic() < deadline:
                try:
                    got = claims.claim_due(5)
                except OperationalError:  # SQLite test database: locked
                    continue
                with lock:
                    taken.extend(claim.delivery_id for claim in got)
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert Counter(taken).most_common(1)[0][1] == 1
    assert sorted(taken) == sorted(ids)


def test_fifty_webhooks_on_one_host_never_overflow_the_connection_pool(
    hooks: Hooks, receiver: HttpsReceiver, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.WEBHOOK_SENDER_THREADS = 16
    receiver.set_behaviour(delay=0.02)
    webhooks = [hooks.webhook(f"/hook/{n}") for n in range(50)]
    deliveries = [hooks.delivery(webhooks[n % 50]) for n in range(200)]

    with caplog.at_level("WARNING", logger="urllib3"):
        tasks.attempt_deliveries([(d.id, d.webhook_id) for d in deliveries])
        wait_for(lambda: settled(*deliveries), timeout=60)

    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]
