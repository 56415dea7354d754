"""A process's delivery pool: what picks work is kept apart from what waits on the network.

- a **dispatcher** thread claims rows: only as many as there are idle sender threads, never more
  than ``per_webhook`` on the network for one webhook, webhooks taken round-robin. Rows it
  cannot take yet wait in memory (bounded) without a lease, so a lease never waits in a queue
  and a backlog for one webhook cannot take every sender. Only a webhook whose last attempt
  was answered (any HTTP status) gets ``per_webhook``; one that timed out or could not be
  reached, or has not been tried yet by this process, gets one attempt at a time until one is
  answered. So a dead endpoint holds one sender thread, not ``per_webhook``;
- **sender** threads (long-lived, fed by a queue) make the attempts over the shared
  keep-alive ``WebhookSender`` and never touch the database; a finished attempt frees its
  thread and webhook slot at once;
- the **recorder** (``recorder.Recorder``) writes finished attempts in batches and so gives the
  leases back. While ``MAX_FINISHED_UNRECORDED`` finished attempts wait for it, the dispatcher
  claims nothing: that bounds what a crash would send twice. When a recorded batch ends such a
  pause, the dispatcher claims at once, without the gathering pause below.

The dispatcher gathers freed slots for a moment (``CLAIM_LINGER_SECONDS``) before a claim: on
a busy worker one claim then covers many rows for the cost of one. Offered rows (a task's, a
timer round's page) arrive together and are claimed at once. The database sees two
connections per process however many senders there are. Every structure is bounded (slots by
the thread count, waiting ids by ``max_waiting``, answering webhooks by ``MAX_ANSWERING``) and
per-webhook counters are dropped when a webhook has nothing on the network, so memory stays
flat.

``close(deadline)`` stops claiming, gives back claims no sender has started, lets attempts on
the network finish until the deadline, gives back the leases of those that did not, and
records the rest.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from django.db import connection

from webhooks.delivery import sender
from webhooks.delivery.claims import (
    Claim,
    ClaimInterrupted,
    Finished,
    claim_deliveries,
    due_candidates,
    give_back,
)
from webhooks.delivery.connections import refresh_connection
from webhooks.delivery.recorder import MAX_FINISHED_UNRECORDED, Recorder
from webhooks.models import AttemptError

logger = logging.getLogger(__name__)

MAX_WAITING: Final = 10_000
# Webhooks remembered as answering (full in-flight limit); the least recent is forgotten first.
MAX_ANSWERING: Final = 10_000
# How long the dispatcher gathers freed slots before a claim (a round trip to the database).
CLAIM_LINGER_SECONDS: Final = 0.01
_IDLE_WAIT_SECONDS: Final = 1.0
_ERROR_PAUSE_SECONDS: Final = 0.5
_STOP: Final = object()


@dataclass(frozen=True)
class DueOffer:
    """What a timer round offered, and whether due rows may have been left in the database
    (no room for them, or a full page). Rows of webhooks at their in-flight limit are left to
    the next round."""

    offered: int
    more_may_be_due: bool


class DeliveryPool:
    def __init__(
        self,
        *,
        threads: int,
        per_webhook: int,
        max_waiting: int = MAX_WAITING,
        max_finished_unrecorded: int = MAX_FINISHED_UNRECORDED,
        on_hungry: Callable[[], None] | None = None,
    ) -> None:
        """``on_hungry`` is called (on the dispatcher's thread) whenever the pool has idle
        sender threads and nothing waiting: the moment to offer it more, if more is due."""
        if threads < 1 or per_webhook < 1 or max_finished_unrecorded < 1:
            raise ValueError("threads, per_webhook and max_finished_unrecorded must be positive")
        self.threads = threads
        self.per_webhook = per_webhook
        self._max_waiting = max_waiting
        self._max_unrecorded = threads + max_finished_unrecorded
        self._max_finished = max_finished_unrecorded
        self._on_hungry = on_hungry
        self._cond = threading.Condition()
        self._on_wire: dict[str, int] = {}  # webhook id -> attempts on the network now
        # Webhooks whose last attempt was answered; any other gets one attempt at a time.
        self._answering: OrderedDict[str, None] = OrderedDict()
        self._busy = 0  # sender threads taken (attempts on the network)
        self._unrecorded = 0  # claimed rows not yet recorded (the leases this process holds)
        self._sending: dict[str, Claim] = {}  # delivery id -> its claim, while on the network
        self._waiting: OrderedDict[str, deque[str]] = OrderedDict()  # webhook id -> ids
        self._waiting_ids: set[str] = set()
        self._changed = False  # a slot was freed or work arrived since the last round
        self._urgent = False  # claim without the gathering pause: new work, or claiming resumed
        self._stopping = False
        self._unstarted: list[Claim] = []  # claimed, but stopping began before they were sent
        # Plain threads on a queue, not a ThreadPoolExecutor: no Future and lock per attempt.
        self._claims: queue.SimpleQueue[Claim | object] = queue.SimpleQueue()
        self._senders = [
            threading.Thread(target=self._send_loop, name=f"webhook-sender-{n}", daemon=True)
            for n in range(threads)
        ]
        self._dispatcher = threading.Thread(
            target=self._dispatch_loop, name="webhook-dispatcher", daemon=True
        )
        self._recorder = Recorder(
            on_recorded=self._release_recorded,
            on_due_again=self.offer,
            claims_stop_at=max_finished_unrecorded,
        )
        for thread in (self._dispatcher, *self._senders):
            thread.start()

    # --- feeding work ---------------------------------------------------------------------

    def offer(self, due: Iterable[tuple[str, str]]) -> None:
        """Attempt these rows, (delivery id, webhook id), as soon as there is room; those no
        longer due when claimed are skipped. They arrive together (a task's rows, a timer
        round's page), so the next claim skips the pause that gathers freed slots."""
        rows = list(due)
        if not rows:
            return
        with self._cond:
            self._enqueue(rows)
            self._changed = True
            self._urgent = True
            self._cond.notify_all()

    def offer_due(self) -> DueOffer:
        """One timer round: offer what is due in the database, as much as there is room for."""
        with self._cond:
            room = 0 if self._stopping else self.threads - self._busy
            saturated = [w for w, n in self._on_wire.items() if n >= self._limit(w)]
        if room <= 0:
            return DueOffer(offered=0, more_may_be_due=not self._stopping)
        limit = max(2 * room, 32)
        due = due_candidates(exclude_webhooks=saturated, limit=limit)
        self.offer(due)
        return DueOffer(offered=len(due), more_may_be_due=len(due) >= limit)

    def _enqueue(self, due: Iterable[tuple[str, str]]) -> None:
        for delivery_id, webhook_id in due:
            if delivery_id in self._waiting_ids:
                continue
            if len(self._waiting_ids) >= self._max_waiting:
                return  # dropped ids stay due in the database; the timer finds them again
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
        about what a claim for one row does. Offered work is claimed at once.
        """
        with self._cond:
            while not self._stopping and not self._changed:
                self._cond.wait(_IDLE_WAIT_SECONDS)
            if not self._urgent and not self._stopping:
                self._cond.wait(CLAIM_LINGER_SECONDS)
            self._changed = self._urgent = False
            return not self._stopping

    def _dispatch(self) -> None:
        refresh_connection()
        picks = self._reserve()
        if not picks:
            if self._on_hungry is not None and self._hungry():
                self._on_hungry()
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

    def _hungry(self) -> bool:
        with self._cond:
            return not (self._stopping or self._waiting) and self._busy < self.threads

    def _reserve(self) -> list[tuple[str, str]]:
        """Take waiting ids round-robin by webhook while there are free slots, holding them."""
        picks: list[tuple[str, str]] = []
        with self._cond:
            if self._recorder_behind():
                return picks  # claim nothing until it catches up
            for webhook_id in list(self._waiting):
                room = min(
                    self._limit(webhook_id) - self._on_wire.get(webhook_id, 0),
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

    def _recorder_behind(self) -> bool:
        """The cap of finished attempts waiting for the recorder is reached (lock held)."""
        return self._unrecorded - self._busy >= self._max_finished

    def _limit(self, webhook_id: str) -> int:
        return self.per_webhook if webhook_id in self._answering else 1

    def _note_answer(self, webhook_id: str, *, answered: bool) -> None:
        if not answered:
            self._answering.pop(webhook_id, None)
            return
        self._answering[webhook_id] = None
        self._answering.move_to_end(webhook_id)
        if len(self._answering) > MAX_ANSWERING:
            self._answering.popitem(last=False)

    def _release_wire(self, webhook_ids: Iterable[str]) -> None:
        """Attempts off the network: their sender threads and webhook slots are free again."""
        with self._cond:
            self._release_wire_locked(webhook_ids)

    def _release_wire_locked(self, webhook_ids: Iterable[str]) -> None:
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
                if self._recorder_behind():
                    self._urgent = True  # claiming was held back: senders are idle, claim now
                self._unrecorded -= count
                self._changed = True
                self._cond.notify_all()

    # --- senders --------------------------------------------------------------------------

    def _send_loop(self) -> None:
        while (claim := self._claims.get()) is not _STOP:
            assert isinstance(claim, Claim)
            self._attempt(claim)

    def _attempt(self, claim: Claim) -> None:
        with self._cond:
            if self._stopping:  # claimed, never sent: given back by close()
                self._unstarted.append(claim)
                self._release_wire_locked([claim.webhook_id])
                return
            self._sending[claim.delivery_id] = claim
        try:
            result = sender.send_delivery(claim)
        except Exception:
            logger.exception("Webhook attempt for %s crashed", claim.delivery_id)
            result = sender.refused(AttemptError.CONNECTION_ERROR)
        with self._cond:
            self._sending.pop(claim.delivery_id, None)
            self._note_answer(claim.webhook_id, answered=result.status_code is not None)
        self._recorder.put(Finished(claim, result))
        self._release_wire([claim.webhook_id])

    # --- life cycle -----------------------------------------------------------------------

    def in_flight(self) -> int:
        """Rows this process holds: claimed, and not yet recorded."""
        with self._cond:
            return self._unrecorded

    def close(self, timeout: float | None = None) -> None:
        """Stop claiming; give back claims not yet sent; let attempts on the network finish
        for up to ``timeout`` seconds (forever if None) and record them; give back the leases
        of those still on the network then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._waiting.clear()
            self._waiting_ids.clear()
            self._cond.notify_all()
        self._dispatcher.join(_left(deadline))
        for _ in self._senders:
            self._claims.put(_STOP)  # after every claim already queued
        for thread in self._senders:
            thread.join(_left(deadline))
        with self._cond:
            abandoned = [*self._unstarted, *self._sending.values()]
            self._unstarted.clear()
        self._give_back(abandoned)
        self._recorder.stop(_left(deadline, floor=1.0))

    @staticmethod
    def _give_back(claims: list[Claim]) -> None:
        if not claims:
            return
        try:
            give_back(claims)
        except Exception:
            logger.exception("Giving back %d webhook leases failed; they expire", len(claims))
        finally:
            connection.close()


def _left(deadline: float | None, floor: float = 0.0) -> float | None:
    """Seconds until ``deadline`` (None: no limit), at least ``floor``."""
    if deadline is None:
        return None
    return max(floor, deadline - time.monotonic())
