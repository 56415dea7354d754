"""The engine of one process: sender threads, each looping take a claimed row -> send ->
record; a claim leases rows for all the process's senders. ``wake()`` rouses sleeping senders,
which otherwise look every ``IDLE_SECONDS``. The threads are not daemons: when the process's
main thread ends (a django-q2 worker leaving its task loop) or ``stop()`` is called, each
finishes and records the attempt it has on the network, gives back what it had not started,
and ends; the process exits after that.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from datetime import timedelta
from typing import Final

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from gshost import process_state
from webhooks.delivery import claims
from webhooks.delivery.claims import Claim
from webhooks.delivery.record import Finished, record_attempts
from webhooks.models import AttemptError
from webhooks.targets.signed import DELIVERY_HEADER, EVENT_HEADER, refused, send_signed
from webhooks.targets.transport import AttemptResult

logger = logging.getLogger(__name__)

# An idle sender's longest sleep, and the due scan's pause once it found nothing: together
# they bound how late a retry or a lost hand-off's row starts (about a second at worst).
IDLE_SECONDS: Final = 0.5
STOP_SECONDS: Final = 12.0  # the attempt deadline (10 s) and recording
_RECORD_PAUSES: Final = (0.1, 0.5, 1.0)  # a failed recording is tried again after these
MAX_ANSWERED: Final = 100_000
MAX_NAMED: Final = 10_000  # named rows beyond it are dropped; they stay due for the scan


def send_delivery(claim: Claim) -> AttemptResult:
    """One attempt of a claimed delivery: fresh timestamp and signature, the stored body."""
    extra = {EVENT_HEADER: claim.event, DELIVERY_HEADER: claim.delivery_id}
    return send_signed(claim, claim.body.encode(), claim.delivery_id, extra)


class InFlight:
    """Rows claimed and not yet attempted or given back, per webhook, in this process. A
    webhook whose last attempt here went unanswered (timeout, refused), or that has had none
    yet, gets one at a time, so dead endpoints hold few senders."""

    def __init__(self, per_webhook: int) -> None:
        self._per_webhook = per_webhook
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._answered: set[str] = set()  # whose last attempt here was answered

    def full(self) -> list[str]:
        with self._lock:
            return [w for w, n in self._counts.items() if n >= self._limit(w)]

    def admit(self, taken: list[Claim]) -> tuple[list[Claim], list[Claim]]:
        """Count the claimed rows in up to each webhook's limit; the rest are to give back."""
        kept: list[Claim] = []
        over: list[Claim] = []
        with self._lock:
            for claim in taken:
                count = self._counts.get(claim.webhook_id, 0)
                if count >= self._limit(claim.webhook_id):
                    over.append(claim)
                    continue
                self._counts[claim.webhook_id] = count + 1
                kept.append(claim)
        return kept, over

    def finish(self, webhook_id: str, *, answered: bool | None) -> None:
        """``answered`` None: given back unattempted, no news of the endpoint."""
        with self._lock:
            left = self._counts.pop(webhook_id, 1) - 1
            if left:
                self._counts[webhook_id] = left
            if answered and len(self._answered) < MAX_ANSWERED:
                self._answered.add(webhook_id)
            elif answered is False:
                self._answered.discard(webhook_id)

    def _limit(self, webhook_id: str) -> int:
        return self._per_webhook if webhook_id in self._answered else 1


class Engine:
    def __init__(self, threads: int, *, claim_rows: int, per_webhook: int) -> None:
        self._claim_rows = claim_rows
        self._in_flight = InFlight(per_webhook)
        # Rows the hand-offs named, claimed by id (a primary-key lookup); thread-safe deque.
        self._named: deque[tuple[str, str]] = deque(maxlen=MAX_NAMED)
        # One claim at a time per process, so each sees what the previous one took.
        self._claim_lock = threading.Lock()
        self._claimed: deque[Claim] = deque()  # leased here, for the next free sender
        self._scanned_empty_at = 0.0
        self._finished: deque[Finished] = deque()  # attempts waiting for the recording lock
        self._recording = threading.Lock()
        self._cond = threading.Condition()
        self._wakes = 0
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._run, name=f"webhook-sender-{n}", daemon=False)
            for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def wake(self, deliveries: Sequence[tuple[str, str]] = ()) -> None:
        """Rouse the senders; ``deliveries`` (delivery id, webhook id) are claimed first."""
        self._named.extend(deliveries)
        with self._cond:
            self._wakes += 1
            self._cond.notify_all()

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Claim nothing more; let attempts on the network finish and be recorded."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def is_alive(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def _stopped(self) -> bool:
        return self._stopping or not threading.main_thread().is_alive()

    def _run(self) -> None:
        try:
            while not self._stopped():
                seen = self._wakes
                if not self._round():
                    self._sleep(seen)
            with self._claim_lock:
                unsent, self._claimed = list(self._claimed), deque()
            self._give_back(unsent)
        finally:
            connection.close()

    def _sleep(self, seen: int) -> None:
        """Until a wake since ``seen`` (none is lost while claiming), a stop, or IDLE_SECONDS."""
        with self._cond:
            self._cond.wait_for(lambda: self._wakes != seen or self._stopping, IDLE_SECONDS)

    def _round(self) -> bool:
        """Take a claimed row, send it, record it; False when nothing was due (or the database
        failed)."""
        try:
            claim = self._next_claim()
        except Exception:
            logger.exception("Claiming webhook deliveries failed")
            connection.close()
            return False
        if claim is None:
            close_old_connections()
            return bool(self._named)
        deadline = timezone.now() + timedelta(seconds=float(settings.WEBHOOK_TIMEOUT_SECONDS))
        if self._stopped() or deadline > claim.lease_expires_at:
            self._give_back([claim])  # not enough lease left for a whole attempt
        else:
            self._record(Finished(claim, self._attempt(claim)))
        return True

    def _next_claim(self) -> Claim | None:
        """The next of this process's claimed rows, claiming more when none are left. One
        claim takes up to WEBHOOK_CLAIM_ROWS rows for all the senders: one round trip serves
        many attempts, and no row waits behind another's attempt for the sender that claimed
        it."""
        with self._claim_lock:
            if not self._claimed:
                taken = self._claim()
                self._claimed.extend(taken)
                if len(taken) > 1:
                    self.wake()  # the sleeping senders take the rest
            return self._claimed.popleft() if self._claimed else None

    def _claim(self) -> list[Claim]:
        """Named rows first, by id; else the due rows. Scanning for due rows costs an index
        scan, so it runs at once while it finds rows and, once it found none, not again for
        IDLE_SECONDS in this process. Rows beyond a webhook's limit go back at once. Named rows
        are claimed by primary key, which costs less than the scan's index range over a
        backlog."""
        full = set(self._in_flight.full())
        named = self._take_named(full)
        if named:
            taken = claims.claim_due(len(named), ids=named)
        elif time.monotonic() - self._scanned_empty_at >= IDLE_SECONDS:
            taken = claims.claim_due(self._claim_rows, skip_webhooks=full)
            if not taken:
                self._scanned_empty_at = time.monotonic()
        else:
            taken = []
        kept, over = self._in_flight.admit(taken)
        claims.give_back(over)
        return kept

    def _take_named(self, full: set[str]) -> list[str]:
        """Up to claim_rows named ids. Those of webhooks at their limit are dropped: they stay
        due, and the scan finds them once there is room."""
        ids: list[str] = []
        while self._named and len(ids) < self._claim_rows:
            delivery_id, webhook_id = self._named.popleft()
            if webhook_id not in full:
                ids.append(delivery_id)
        return ids

    def _record(self, done: Finished) -> None:
        """Record at once, with whatever other senders finished meanwhile: the sender that
        gets the recording lock writes everything waiting in one batch (one statement on
        PostgreSQL), the others go back to sending: one commit serves every attempt finished
        meanwhile. A crash re-sends only what was on the network or waiting for the batch
        being written; no row waits for a slower attempt."""
        self._finished.append(done)
        while self._finished and self._recording.acquire(blocking=False):
            try:
                batch = [self._finished.popleft() for _ in range(len(self._finished))]
                _record(batch)
            finally:
                self._recording.release()

    def _give_back(self, unsent: list[Claim]) -> None:
        """Release unstarted rows; if the database fails, their leases run out instead."""
        for claim in unsent:
            self._in_flight.finish(claim.webhook_id, answered=None)
        try:
            claims.give_back(unsent)
        except Exception:
            logger.exception("Giving back %d webhook deliveries failed", len(unsent))
            connection.close()

    def _attempt(self, claim: Claim) -> AttemptResult:
        result = refused(AttemptError.CONNECTION_ERROR)
        try:
            result = send_delivery(claim)
        except Exception:
            logger.exception("Webhook attempt for %s crashed", claim.delivery_id)
        finally:
            self._in_flight.finish(claim.webhook_id, answered=result.status_code is not None)
        return result


def _record(finished: list[Finished]) -> None:
    """Record, trying again a few times; unrecorded, the rows are retaken when the lease ends."""
    for pause in (*_RECORD_PAUSES, None):
        try:
            record_attempts(finished)
            return
        except Exception:
            logger.exception("Recording %d webhook attempts failed", len(finished))
            connection.close()
            if pause is None:
                return
            time.sleep(pause)


# --- this process's engine ---------------------------------------------------------------------

_lock = threading.Lock()
_engine: tuple[int, Engine] | None = None


def get_engine() -> Engine:
    """This process's engine, started on first use (never one inherited across fork)."""
    global _engine
    with _lock:
        if _engine is not None and _engine[0] == os.getpid() and _engine[1].is_alive():
            return _engine[1]
        engine = Engine(
            int(settings.WEBHOOK_SENDER_THREADS),
            claim_rows=int(settings.WEBHOOK_CLAIM_ROWS),
            per_webhook=int(settings.WEBHOOK_MAX_IN_FLIGHT_PER_WEBHOOK),
        )
        _engine = (os.getpid(), engine)
        return engine


def stop_engine(timeout: float = STOP_SECONDS) -> None:
    global _engine
    with _lock:
        current, _engine = _engine, None
    if current is not None and current[0] == os.getpid():
        current[1].stop(timeout)


def attempt_deliveries(deliveries: Sequence[tuple[str, str]]) -> None:
    """Rows were published: wake this process's senders, which claim them first."""
    if deliveries:
        get_engine().wake(deliveries)


# Reset in name order, so the engine's threads stop before "webhooks.sender" closes the sender.
process_state.register(
    "webhooks.delivery",
    bound="WEBHOOK_SENDER_THREADS threads",
    reset=stop_engine,
)
