"""The process-wide delivery pool: what picks work is kept apart from what waits on the network.

- a **dispatcher** thread claims rows: only as many as there are idle sender threads, never more
  than ``per_webhook`` on the network for one webhook, webhooks taken round-robin. Rows it
  cannot take yet wait in memory (bounded) without a lease, so a lease never waits in a queue
  and a dead endpoint (or a backlog for one webhook) cannot take every sender;
- **sender** threads (long-lived, fed by a queue) make the attempts over the shared
  keep-alive ``WebhookSender`` and never touch the database; a finished attempt frees its
  thread and webhook slot at once;
- a **recorder** thread writes finished attempts in batches (one transaction each) and so gives
  the leases back. Claimed-but-unrecorded rows are capped at ``UNRECORDED_PER_THREAD`` per
  sender thread, which is the backpressure when the database is the slow part.

The dispatcher and the recorder gather work for a moment (``CLAIM_LINGER_SECONDS``,
``RECORD_LINGER_SECONDS``) before each round trip: on
a busy worker a claim or a batch then covers many rows for the cost of one. The database sees
two connections per process however many senders there are. Every structure is bounded (slots
by the thread count, waiting ids by ``max_waiting``) and per-webhook counters are dropped when
a webhook has nothing on the network, so memory stays flat.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from typing import Final

from django.conf import settings
from django.db import close_old_connections, connection

from webhooks import attempts
from webhooks.claims import (
    Claim,
    ClaimInterrupted,
    Finished,
    claim_deliveries,
    due_candidates,
    record_attempts,
)
from webhooks.models import AttemptError

logger = logging.getLogger(__name__)

RECORD_BATCH: Final = 200
MAX_WAITING: Final = 10_000
RECORDERS: Final = 1  # more did not help: the GIL, not the database, is the limit
# How long the dispatcher and the recorders gather work before a round trip to the database.
CLAIM_LINGER_SECONDS: Final = 0.01
# Recording waits longer: it only gives leases back, and larger batches cost fewer statements.
RECORD_LINGER_SECONDS: Final = 0.05
# Claimed rows whose attempt is over but not yet recorded, per sender thread: lets the recorders
# write in larger batches when they are the bottleneck, without unbounded backlog.
UNRECORDED_PER_THREAD: Final = 4
_IDLE_WAIT_SECONDS: Final = 1.0
_ERROR_PAUSE_SECONDS: Final = 0.5
# A failed batch (a lock timeout, a dropped connection) is tried again before going row by row.
_RECORD_RETRY_PAUSES: Final = (0.05, 0.2, 0.5)
_CONNECTION_CHECK_SECONDS: Final = 1.0
_STOP: Final = object()


class DeliveryPool:
    def __init__(
        self,
        *,
        threads: int,
        per_webhook: int,
        max_waiting: int = MAX_WAITING,
        recorders: int = RECORDERS,
    ) -> None:
        if threads < 1 or per_webhook < 1 or recorders < 1:
            raise ValueError("threads, per_webhook and recorders must be positive")
        self.threads = threads
        self.per_webhook = per_webhook
        self._max_waiting = max_waiting
        self._max_unrecorded = threads * UNRECORDED_PER_THREAD
        self._cond = threading.Condition()
        self._on_wire: dict[str, int] = {}  # webhook id -> attempts on the network now
        self._busy = 0  # sender threads taken (attempts on the network)
        self._unrecorded = 0  # claimed rows not yet recorded (the leases this process holds)
        self._waiting: OrderedDict[str, deque[str]] = OrderedDict()  # webhook id -> ids
        self._waiting_ids: set[str] = set()
        self._changed = False  # a slot was freed or work arrived since the last round
        self._urgent = False  # new work from a task arrived since the last round
        self._stopping = False
        self._results: queue.SimpleQueue[Finished | object] = queue.SimpleQueue()
        # Plain threads on a queue, not a ThreadPoolExecutor: no Future and lock per attempt.
        self._claims: queue.SimpleQueue[Claim | object] = queue.SimpleQueue()
        self._senders = [
            threading.Thread(target=self._send_loop, name=f"webhook-sender-{n}", daemon=True)
            for n in range(threads)
        ]
        self._dispatcher = threading.Thread(
            target=self._dispatch_loop, name="webhook-dispatcher", daemon=True
        )
        self._recorders = [
            threading.Thread(target=self._record_loop, name=f"webhook-recorder-{n}", daemon=True)
            for n in range(recorders)
        ]
        for thread in (self._dispatcher, *self._senders, *self._recorders):
            thread.start()

    # --- feeding work ---------------------------------------------------------------------

    def offer(self, due: Iterable[tuple[str, str]], *, urgent: bool = False) -> None:
        """Attempt these rows, (delivery id, webhook id), as soon as there is room; those no
        longer due when claimed are skipped. ``urgent`` (new work from a task) skips the
        gathering pause before the next claim."""
        with self._cond:
            self._enqueue(due)
            self._changed = True
            self._urgent = self._urgent or urgent
            self._cond.notify_all()

    def offer_due(self) -> int:
        """One sweep round: offer what is due in the database, as much as there is room for."""
        with self._cond:
            room = self.threads - self._busy
            saturated = [w for w, n in self._on_wire.items() if n >= self.per_webhook]
        if room <= 0:
            return 0
        due = due_candidates(exclude_webhooks=saturated, limit=max(2 * room, 32))
        self.offer(due)
        return len(due)

    def _enqueue(self, due: Iterable[tuple[str, str]]) -> None:
        for delivery_id, webhook_id in due:
            if delivery_id in self._waiting_ids:
                continue
            if len(self._waiting_ids) >= self._max_waiting:
                return  # dropped ids stay due in the database; the sweep finds them again
            self._waiting.setdefault(webhook_id, deque()).append(delivery_id)
            self._waiting_ids.add(delivery_id)

    # --- dispatcher -----------------------------------------------------------------------

    def _dispatch_loop(self) -> None:
        try:
            while self._next_round():
                try:
                    self._dispatch()
                except Exception:
                    logger.exception("Webhook dispatcher round failed")
                    connection.close()
                    time.sleep(_ERROR_PAUSE_SECONDS)
        finally:
            connection.close()

    def _next_round(self) -> bool:
        """Wait for something to do; False when stopping.

        Freed slots are gathered for a moment before claiming: one claim for many rows costs
        about what a claim for one row does. New work from a task is claimed at once.
        """
        with self._cond:
            while not self._stopping and not self._changed:
                self._cond.wait(_IDLE_WAIT_SECONDS)
            if not self._urgent and not self._stopping:
                self._cond.wait(CLAIM_LINGER_SECONDS)
            self._changed = self._urgent = False
            return not self._stopping

    def _dispatch(self) -> None:
        _refresh_connection()
        picks = self._reserve()
        if not picks:
            return
        failure: Exception | None = None
        try:
            claimed = claim_deliveries([delivery_id for delivery_id, _ in picks])
        except ClaimInterrupted as interrupted:
            claimed, failure = interrupted.taken, interrupted
        except Exception as error:
            claimed, failure = [], error
        for claim in claimed:
            self._claims.put(claim)
        taken = {claim.delivery_id for claim in claimed}
        untaken = [pick for pick in picks if pick[0] not in taken]
        self._release_wire(webhook_id for _, webhook_id in untaken)
        self._release_recorded(len(untaken))
        if failure is not None:
            self.offer(untaken)  # still wanted: the failed claim did not decide about them
            raise failure

    def _reserve(self) -> list[tuple[str, str]]:
        """Take waiting ids round-robin by webhook while there are free slots, holding them."""
        picks: list[tuple[str, str]] = []
        with self._cond:
            for webhook_id in list(self._waiting):
                room = min(
                    self.per_webhook - self._on_wire.get(webhook_id, 0),
                    self.threads - self._busy,
                    self._max_unrecorded - self._unrecorded,
                )
                bucket = self._waiting[webhook_id]
                for _ in range(min(room, len(bucket))):
                    delivery_id = bucket.popleft()
                    self._waiting_ids.discard(delivery_id)
                    picks.append((delivery_id, webhook_id))
                    self._on_wire[webhook_id] = self._on_wire.get(webhook_id, 0) + 1
                    self._busy += 1
                    self._unrecorded += 1
                if not bucket:
                    del self._waiting[webhook_id]
                elif room > 0:
                    self._waiting.move_to_end(webhook_id)  # next round starts with the others
                if self._busy >= self.threads or self._unrecorded >= self._max_unrecorded:
                    break
        return picks

    def _release_wire(self, webhook_ids: Iterable[str]) -> None:
        """Attempts off the network: their sender threads and webhook slots are free again."""
        with self._cond:
            for webhook_id in webhook_ids:
                left = self._on_wire.get(webhook_id, 0) - 1
                if left > 0:
                    self._on_wire[webhook_id] = left
                else:
                    self._on_wire.pop(webhook_id, None)
                self._busy -= 1
                self._changed = True
            self._cond.notify_all()

    def _release_recorded(self, count: int) -> None:
        if count:
            with self._cond:
                self._unrecorded -= count
                self._changed = True
                self._cond.notify_all()

    # --- senders --------------------------------------------------------------------------

    def _send_loop(self) -> None:
        while (claim := self._claims.get()) is not _STOP:
            assert isinstance(claim, Claim)
            self._attempt(claim)

    def _attempt(self, claim: Claim) -> None:
        try:
            result = attempts.send_delivery(claim)
        except Exception:
            logger.exception("Webhook attempt for %s crashed", claim.delivery_id)
            result = attempts.refused(AttemptError.CONNECTION_ERROR)
        self._results.put(Finished(claim, result))
        self._release_wire([claim.webhook_id])

    # --- recorder -------------------------------------------------------------------------

    def _record_loop(self) -> None:
        try:
            while True:
                batch, stop = self._next_batch()
                if batch:
                    self._record(batch)
                if stop:
                    return
        finally:
            connection.close()

    def _next_batch(self) -> tuple[list[Finished], bool]:
        """Results that arrive within RECORD_LINGER_SECONDS of the first are written together."""
        try:
            item = self._results.get(timeout=_IDLE_WAIT_SECONDS)
        except queue.Empty:
            return [], False
        batch: list[Finished] = []
        until = time.monotonic() + RECORD_LINGER_SECONDS
        while True:
            if item is _STOP:
                return batch, True
            assert isinstance(item, Finished)
            batch.append(item)
            if len(batch) >= RECORD_BATCH:
                return batch, False
            try:
                item = self._results.get(timeout=max(0.0, until - time.monotonic()))
            except queue.Empty:
                return batch, False

    def _record(self, batch: Sequence[Finished]) -> None:
        _refresh_connection()
        due_again: list[tuple[str, str]] = []
        try:
            due_again = self._record_batch(batch)
        finally:
            self._release_recorded(len(batch))
        if due_again:
            self.offer(due_again)

    def _record_batch(self, batch: Sequence[Finished]) -> list[tuple[str, str]]:
        for pause in _RECORD_RETRY_PAUSES:
            try:
                return record_attempts(batch)
            except Exception:
                logger.warning("Recording %d webhook attempts failed", len(batch), exc_info=True)
                connection.close()
                time.sleep(pause)
        return self._record_each(batch)

    def _record_each(self, batch: Sequence[Finished]) -> list[tuple[str, str]]:
        due_again: list[tuple[str, str]] = []
        for done in batch:
            try:
                due_again += record_attempts([done])
            except Exception:
                # Unrecorded, the row keeps its lease and is attempted again once it expires.
                logger.exception("Recording the attempt of %s failed", done.claim.delivery_id)
                connection.close()
        return due_again

    # --- life cycle -----------------------------------------------------------------------

    def in_flight(self) -> int:
        """Rows this process holds: claimed, and not yet recorded."""
        with self._cond:
            return self._unrecorded

    def close(self) -> None:
        """Stop claiming, let in-flight attempts finish and be recorded, then stop."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify_all()
        self._dispatcher.join()
        for _ in self._senders:
            self._claims.put(_STOP)  # after every claim already queued
        for sender in self._senders:
            sender.join()
        for _ in self._recorders:
            self._results.put(_STOP)
        for recorder in self._recorders:
            recorder.join()


_thread_state = threading.local()


def _refresh_connection() -> None:
    """Drop this thread's connection if broken or too old, at most once a second.

    Each check makes the next query ping the server first (CONN_HEALTH_CHECKS), which would
    cost a round trip per batch if done every time.
    """
    now = time.monotonic()
    if now - getattr(_thread_state, "checked_at", 0.0) >= _CONNECTION_CHECK_SECONDS:
        _thread_state.checked_at = now
        close_old_connections()


_pool_lock = threading.Lock()
_pool: tuple[int, DeliveryPool] | None = None
_exit_hook_registered = False


def get_pool() -> DeliveryPool:
    """This process's pool, started on first use (never one inherited across fork)."""
    global _pool
    with _pool_lock:
        if _pool is not None and _pool[0] == os.getpid():
            return _pool[1]
        pool = DeliveryPool(
            threads=int(settings.WEBHOOK_SENDER_THREADS),
            per_webhook=int(settings.WEBHOOK_MAX_IN_FLIGHT_PER_WEBHOOK),
            recorders=RECORDERS,
        )
        _pool = (os.getpid(), pool)
        _register_exit_hook()
        return pool


def close_pool() -> None:
    """Drain and stop this process's pool (process exit, tests)."""
    global _pool
    with _pool_lock:
        current, _pool = _pool, None
    if current is not None and current[0] == os.getpid():
        current[1].close()


def _register_exit_hook() -> None:
    """Drain the pool before the interpreter joins threads, in django-q2 workers too.

    ``threading._register_atexit`` runs when a process (a forked worker included) shuts down
    its threads: in-flight attempts are recorded
    instead of being repeated after their lease. A worker killed outright records nothing;
    its leases expire and the sweep attempts those rows again.
    """
    global _exit_hook_registered
    register = getattr(threading, "_register_atexit", None)
    if _exit_hook_registered or register is None:
        return
    try:
        register(close_pool)
    except RuntimeError:
        return  # already shutting down
    _exit_hook_registered = True
