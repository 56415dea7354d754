"""The worker side: the process pool (dispatcher, senders, recorder), the timer, and claims
made concurrently. Rows are committed (transactional tests) so the pool's threads see them."""

from __future__ import annotations

import threading
import time
from collections import Counter
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
from webhooks.delivery import claims, engine, sender
from webhooks.delivery.pool import DeliveryPool
from webhooks.delivery.transport import AttemptResult
from webhooks.models import AttemptError, Delivery, DeliveryAttempt, DeliveryStatus

pytestmark = pytest.mark.django_db(transaction=True)


def settled(*deliveries: Delivery) -> bool:
    ids = [delivery.id for delivery in deliveries]
    open_rows = Delivery.objects.filter(id__in=ids).exclude(lease_expires_at__isnull=False)
    return open_rows.filter(status=DeliveryStatus.SUCCESS).count() == len(ids)


def test_the_task_hands_rows_to_the_pool_which_delivers_and_records_them(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    webhooks = [hooks.webhook(f"/hook/{n}") for n in range(5)]
    deliveries = [hooks.delivery(webhooks[n % 5]) for n in range(20)]

    tasks.attempt_deliveries([(d.id, d.webhook_id) for d in deliveries])

    wait_for(lambda: settled(*deliveries))
    assert len(receiver.requests) == 20
    assert engine.get_engine().pool.in_flight() == 0


def test_it_keeps_at_most_four_attempts_in_flight_per_webhook(
    hooks: Hooks, receiver: HttpsReceiver, settings: Any
) -> None:
    settings.WEBHOOK_TIMEOUT_SECONDS = 1.5
    webhook = hooks.webhook("/slowing")
    answered = hooks.delivery(webhook)
    engine.attempt_deliveries([(answered.id, webhook.id)])
    wait_for(lambda: settled(answered))  # an answering webhook: the full limit
    receiver.set_behaviour(path="/slowing", hang=True)
    deliveries = [hooks.delivery(webhook) for _ in range(10)]

    engine.attempt_deliveries([(d.id, d.webhook_id) for d in deliveries])

    wait_for(lambda: len(receiver.requests) >= 1 + 4)
    time.sleep(0.5)
    assert len(receiver.requests) == 1 + 4  # the answered one, then four at once
    leased = Delivery.objects.filter(lease_expires_at__isnull=False).count()
    assert leased == 4  # the rest wait unclaimed: no lease ticks while queued


def test_ten_black_hole_endpoints_do_not_delay_healthy_deliveries(
    hooks: Hooks, receiver: HttpsReceiver, settings: Any
) -> None:
    """The healthy deliveries all arrive while every black hole still holds its connection:
    none of them waited for a black hole's timeout."""
    settings.WEBHOOK_TIMEOUT_SECONDS = 8.0
    dead_ids = []
    for n in range(10):
        receiver.set_behaviour(path=f"/dead/{n}", hang=True)
        dead = hooks.webhook(f"/dead/{n}")
        dead_ids += [(hooks.delivery(dead).id, dead.id) for _ in range(6)]
    engine.attempt_deliveries(dead_ids)
    wait_for(lambda: len(receiver.requests) >= 10)  # one each: none of them has answered

    healthy = [hooks.webhook(f"/ok/{n}") for n in range(10)]
    for _ in range(3):
        batch = [hooks.delivery(webhook) for webhook in healthy]
        engine.attempt_deliveries([(d.id, d.webhook_id) for d in batch])
        wait_for(lambda batch=batch: settled(*batch))  # type: ignore[misc]

    dead = [delivery_id for delivery_id, _ in dead_ids]
    assert not DeliveryAttempt.objects.filter(delivery_id__in=dead).exists()


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
        return sender.refused(AttemptError.TIMEOUT)

    monkeypatch.setattr(sender, "send_delivery", no_answer)
    dead = hooks.webhook("/dead")
    deliveries = [hooks.delivery(dead) for _ in range(12)]

    engine.attempt_deliveries([(d.id, d.webhook_id) for d in deliveries])

    wait_for(lambda: len(alone_after_a_failure) >= 6)
    assert all(alone_after_a_failure)


def test_a_webhook_gets_its_full_limit_once_answered_and_loses_it_without_an_answer() -> None:
    pool = DeliveryPool(threads=8, per_webhook=4)

    def reserved_after(*, answered: bool | None) -> int:
        with pool._cond:
            for webhook_id in list(pool._on_wire):
                pool._release_wire_locked([webhook_id] * pool._on_wire[webhook_id])
            pool._unrecorded = 0
            if answered is not None:
                pool._note_answer("whk_a", answered=answered)
            pool._enqueue([(f"dlv_{n}", "whk_a") for n in range(6)])
        return len(pool._reserve())

    try:
        assert reserved_after(answered=None) == 1  # not tried yet
        assert reserved_after(answered=True) == 4
        assert reserved_after(answered=False) == 1
    finally:
        with pool._cond:
            pool._unrecorded = pool._busy = 0
            pool._on_wire.clear()
        pool.close(timeout=5)


def test_the_timer_picks_up_due_retries_and_expired_leases_without_a_task(
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
    assert len(requests_for(receiver, soon.id)) == 1  # due while the timer ran: taken by it
    (attempt,) = DeliveryAttempt.objects.filter(delivery=soon)
    assert attempt.started_at >= soon.next_attempt_at  # and not before it was due


def test_a_backlog_larger_than_a_round_is_taken_as_fast_as_the_pool_frees_up(
    hooks: Hooks, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.WEBHOOK_SENDER_THREADS = 2  # a round offers 32 rows at most
    monkeypatch.setattr(engine, "_BUSY_ROUND_SECONDS", 3600.0)  # no second round by the clock
    webhooks = [hooks.webhook(f"/hook/{n}") for n in range(8)]
    deliveries = [hooks.delivery(webhooks[n % 8]) for n in range(40)]

    worker = engine.Engine(poll=3600)
    try:
        wait_for(lambda: settled(*deliveries), timeout=20)
    finally:
        worker.stop()


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
                    got = claims.claim_deliveries(ids)
                except claims.ClaimInterrupted as interrupted:  # SQLite test database: locked
                    got = interrupted.taken
                except OperationalError:
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


def test_the_pool_forgets_everything_once_idle(
    hooks: Hooks, receiver: HttpsReceiver, settings: Any
) -> None:
    """Once idle, no attempt and no vanished row still counts against a webhook: four new
    attempts to the same webhook (its limit) all go on the wire while none of them can end.
    A slot still held would keep the fourth waiting for a timeout longer than the wait."""
    settings.WEBHOOK_TIMEOUT_SECONDS = 6.0
    webhooks = [hooks.webhook(f"/hook/{n}") for n in range(3)]
    deliveries = [hooks.delivery(webhooks[n % 3]) for n in range(30)]
    engine.attempt_deliveries([(d.id, d.webhook_id) for d in deliveries])
    engine.attempt_deliveries([("dlv_gone", webhooks[0].id)])
    wait_for(lambda: settled(*deliveries))
    current = engine.get_engine().pool
    wait_for(lambda: current.in_flight() == 0)

    receiver.set_behaviour(path="/hook/0", hang=True)
    again = [hooks.delivery(webhooks[0]) for _ in range(4)]
    engine.attempt_deliveries([(d.id, d.webhook_id) for d in again])

    wait_for(lambda: all(requests_for(receiver, d.id) for d in again), timeout=4.0)


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
