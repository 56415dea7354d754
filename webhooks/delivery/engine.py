"""The engine of one process: its pool, its timer, its start and its stop; the entry points.

In a django-q2 worker the engine starts when the worker process is spawned (``process``) and
stops when the worker leaves its task loop: the timer thread, which is not a daemon, sees the
main thread finish and runs the orderly stop before the process can exit. The stop: claim
nothing more, give back claims not yet sent, let attempts on the network finish for up to
``STOP_SECONDS``, record them, give back the leases of any still out. Elsewhere (tests, a
shell) the engine starts on first use.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

from django.conf import settings
from django.db import connection
from django.utils import timezone

from gshost import handoff
from webhooks.delivery import claims, sender
from webhooks.delivery.connections import refresh_connection
from webhooks.delivery.pool import DeliveryPool
from webhooks.delivery.recorder import record_attempts
from webhooks.delivery.timer import POLL_SECONDS, Timer
from webhooks.delivery.transport import AttemptResult
from webhooks.models import Webhook

logger = logging.getLogger(__name__)

# Attempts on the network get this long to finish when the worker stops; with recording and
# giving leases back the worker is gone well within 15 s.
STOP_SECONDS: Final = 10.0
# How often a worker's timer runs the catch-ups apps register with gshost.handoff.
CATCH_UP_SECONDS: Final = 5.0
# While a round found due rows, the next round comes this soon (more may be waiting).
_BUSY_ROUND_SECONDS: Final = 0.2


class Engine:
    def __init__(self, *, catch_ups: bool = False, poll: float = POLL_SECONDS) -> None:
        self._catch_ups = catch_ups
        self._caught_up_at = 0.0
        self._stop_timeout = STOP_SECONDS
        self._more_due = False  # the last round may have left due rows in the database
        self.timer = Timer(on_round=self._round, on_exit=self._shut_down, poll=poll, start=False)
        self.pool = DeliveryPool(
            threads=int(settings.WEBHOOK_SENDER_THREADS),
            per_webhook=int(settings.WEBHOOK_MAX_IN_FLIGHT_PER_WEBHOOK),
            on_hungry=self._hungry,
        )
        self.timer.start()

    def offer(self, deliveries: Sequence[tuple[str, str]]) -> None:
        self.pool.offer(deliveries)

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Stop claiming, let attempts finish for up to ``timeout`` s, record, give back."""
        self._stop_timeout = timeout
        self.timer.stop()

    def _round(self) -> float | None:
        refresh_connection()
        try:
            if self._catch_ups and time.monotonic() - self._caught_up_at >= CATCH_UP_SECONDS:
                self._caught_up_at = time.monotonic()
                handoff.run_catch_ups()
            return offer_round(self._offer_due)
        except Exception:
            connection.close()
            raise

    def _offer_due(self) -> int:
        offer = self.pool.offer_due()
        self._more_due = offer.more_may_be_due
        return offer.offered

    def _hungry(self) -> None:
        """The pool has idle threads and nothing waiting: if the last round left due rows
        behind, the next round comes now rather than after ``_BUSY_ROUND_SECONDS`` or a poll."""
        if self._more_due:
            self._more_due = False
            self.timer.wake()

    def _shut_down(self) -> None:
        try:
            self.pool.close(timeout=self._stop_timeout)
        finally:
            sender.forget_sender()
            connection.close()


def offer_round(offer_due: Callable[[], int]) -> float | None:
    """Offer what is due; seconds until the next row falls due (None: nothing is waiting).

    The clock is read before the offer: a row that falls due while the offer runs was not due
    for the offer, and is still ahead of that moment for ``next_due_at``, so the next round
    comes at once. Read after, both would miss it and it would wait a whole poll.
    """
    before_offer = timezone.now()
    if offer_due():
        return _BUSY_ROUND_SECONDS
    due = claims.next_due_at(before_offer)
    return None if due is None else (due - timezone.now()).total_seconds()


_lock = threading.Lock()
_engine: tuple[int, Engine] | None = None


def get_engine(*, catch_ups: bool = False) -> Engine:
    """This process's engine, started on first use (never one inherited across fork)."""
    global _engine
    with _lock:
        if _engine is not None and _engine[0] == os.getpid() and _engine[1].timer.is_alive():
            return _engine[1]
        engine = Engine(catch_ups=catch_ups)
        _engine = (os.getpid(), engine)
        return engine


def stop_engine(timeout: float = STOP_SECONDS) -> None:
    """Stop this process's engine, if it has one (tests; a worker stops on its own)."""
    global _engine
    with _lock:
        current, _engine = _engine, None
    if current is not None and current[0] == os.getpid():
        current[1].stop(timeout)


# --- entry points -----------------------------------------------------------------------------


def attempt_deliveries(deliveries: Sequence[tuple[str, str]]) -> None:
    """Hand these rows, (delivery id, webhook id), to the process's pool; returns without
    waiting for them. Rows no longer due when the pool claims them are skipped."""
    if deliveries:
        get_engine().offer(deliveries)


def send_test_ping(webhook: Webhook) -> AttemptResult:
    """Send the test ping now and return its result; nothing is stored, nothing retried."""
    return sender.send_ping(webhook)


def deliver_due_now(delivery_ids: Sequence[str] | None = None) -> int:
    """Claim what is due (among ``delivery_ids`` if given) and attempt it on this thread.

    The synchronous engine: no pool, no threads. Returns the number of attempts made.
    """
    due = claims.due_candidates(ids=delivery_ids)
    taken = claims.claim_deliveries([delivery_id for delivery_id, _ in due])
    for claim in taken:
        record_attempts([claims.Finished(claim, sender.send_delivery(claim))])
    return len(taken)


def reset_process_state() -> None:
    """Stop the engine and drop every per-process cache of the delivery path (tests)."""
    stop_engine()
    sender.forget_sender()
    handoff.reset()
