"""Recording finished attempts: each attempt row and its delivery's new state, in one
transaction per batch, which also gives the leases back.

The ``Recorder`` thread writes what the senders finish within ``RECORD_LINGER_SECONDS`` of the
oldest waiting one as one batch (an attempt that waited behind the previous write is written
with what has queued since, at once). A finished attempt that is not yet recorded is what a
crash would send again, so the pool stops claiming while ``MAX_FINISHED_UNRECORDED`` of them
wait, and a batch that holds that many is written at once, without the linger: nothing is
claimed until it is.
How long attempts actually wait is the ``gshost_webhook_record_delay_seconds`` histogram: the
linger plus a batch's write time (docs/performance.md).

Each attempt's new state is decided here, from the state its claim returned and the
``policy``, without reading the row again; ``batch_writes`` writes the batch (one statement
on PostgreSQL) with the endpoint stats' outcome counts (``rollup``). Once committed, the
recorder tells ``recording_hooks`` what happened: delivery metrics, and failure notices for
deliveries that have just failed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Final

from django.db import connection
from django.utils import timezone

from webhooks.delivery import policy
from webhooks.delivery.batch_writes import RowChange, write_batch
from webhooks.delivery.claims import Finished
from webhooks.delivery.connections import refresh_connection
from webhooks.delivery.policy import DeliveryState
from webhooks.health import recording_hooks
from webhooks.metrics import AttemptOutcome
from webhooks.models import AttemptTrigger

logger = logging.getLogger(__name__)

RECORD_BATCH: Final = 200
# Results put within this of the oldest waiting one are written together (one transaction).
RECORD_LINGER_SECONDS: Final = 0.01
# Finished, unrecorded attempts at which the pool stops claiming (the crash re-send bound).
# Lower bounds re-sends more tightly; it cost throughput while a batch took several round
# trips, and no longer does at 16 (docs/performance.md).
MAX_FINISHED_UNRECORDED: Final = 16
_IDLE_WAIT_SECONDS: Final = 1.0
# A failed batch (a lock timeout, a dropped connection) is tried again before going row by row.
_RECORD_RETRY_PAUSES: Final = (0.05, 0.2, 0.5)
_STOP: Final = object()

DueAgain = Callable[[list[tuple[str, str]]], None]
Recorded = Callable[[int], None]


class Recorder:
    """One thread writing finished attempts in batches; ``put`` never blocks."""

    def __init__(
        self,
        *,
        on_recorded: Recorded,
        on_due_again: DueAgain,
        claims_stop_at: int = MAX_FINISHED_UNRECORDED,
    ) -> None:
        """``claims_stop_at``: the unrecorded attempts at which the pool stops claiming."""
        # Each result with the moment it was put (time.monotonic()), which starts its linger.
        self._results: queue.SimpleQueue[tuple[float, Finished] | object] = queue.SimpleQueue()
        self._claims_stop_at = claims_stop_at
        self._on_recorded = on_recorded
        self._on_due_again = on_due_again
        self._thread = threading.Thread(target=self._loop, name="webhook-recorder", daemon=True)
        self._thread.start()

    def put(self, finished: Finished) -> None:
        self._results.put((time.monotonic(), finished))

    def stop(self, timeout: float | None = None) -> bool:
        """Record everything put so far, then end; False if that took longer than timeout."""
        self._results.put(_STOP)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _loop(self) -> None:
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
        try:
            item = self._results.get(timeout=_IDLE_WAIT_SECONDS)
        except queue.Empty:
            return [], False
        batch: list[Finished] = []
        until: float | None = None
        while True:
            if item is _STOP:
                return batch, True
            assert isinstance(item, tuple)
            put_at, finished = item
            if until is None:
                # From when the oldest was put, not when it was taken: a result that waited
                # behind the previous batch's write has had its linger.
                until = put_at + RECORD_LINGER_SECONDS
            batch.append(finished)
            if len(batch) >= RECORD_BATCH:
                return batch, False
            if len(batch) >= self._claims_stop_at:
                until = 0.0  # the pool has stopped claiming: take what is queued, write now
            try:
                item = self._results.get(timeout=max(0.0, until - time.monotonic()))
            except queue.Empty:
                return batch, False

    def _record(self, batch: Sequence[Finished]) -> None:
        refresh_connection()
        due_again: list[tuple[str, str]] = []
        try:
            for part in one_per_delivery(batch):
                due_again += self._record_batch(part)
        finally:
            self._on_recorded(len(batch))
        if due_again:
            self._on_due_again(due_again)

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


def record_attempts(finished: Sequence[Finished]) -> list[tuple[str, str]]:
    """Write each attempt and its delivery's new state, all or nothing; release the leases.
    ``finished`` holds each delivery at most once (``one_per_delivery``).

    Returns (delivery id, webhook id) of rows that are due again at once (a redelivery asked
    for while another attempt was in flight), so the caller can pick them up without waiting.
    """
    if not finished:
        return []
    now = timezone.now()
    changes = [_change(done, now) for done in finished]
    outcomes, due_again = [], []
    for done, change, written in zip(finished, changes, write_batch(changes), strict=True):
        if written is None:
            continue  # deleted meanwhile (webhook deleted, history purged)
        after = change.state if written.applied else done.claim.state
        outcomes.append(_outcome(done, written.attempt_number, after))
        if written.applied and _due_again(after, written.redelivery_requested_at, now):
            due_again.append((done.claim.delivery_id, done.claim.webhook_id))
    recording_hooks.after_commit(outcomes)
    return due_again


def one_per_delivery(batch: Sequence[Finished]) -> list[list[Finished]]:
    """The batch in parts that hold each delivery at most once, in order. A delivery twice in
    one batch (its first lease ran out before the attempt was recorded, and it was claimed
    again) is rare, and its second attempt must be numbered after the first."""
    parts: list[tuple[set[str], list[Finished]]] = []
    for done in batch:
        delivery_id = done.claim.delivery_id
        for ids, part in parts:
            if delivery_id not in ids:
                ids.add(delivery_id)
                part.append(done)
                break
        else:
            parts.append(({delivery_id}, [done]))
    return [part for _, part in parts]


def _change(done: Finished, now: datetime) -> RowChange:
    claim, result = done.claim, done.result
    after = policy.after_attempt(
        claim.state,
        trigger=claim.trigger,
        status_code=result.status_code,
        error=result.error,
        now=now,
    )
    answers_request = claim.trigger == AttemptTrigger.REDELIVERY
    return RowChange(
        delivery_id=claim.delivery_id,
        lease=claim.lease_expires_at,
        attempt={
            "trigger": claim.trigger.value,
            "started_at": result.started_at,
            "duration_ms": result.duration_ms,
            "status_code": result.status_code,
            "response_body": result.response_body,
            "request_headers": result.request_headers,
            "response_headers": result.response_headers,
            "error": result.error or "",
        },
        state=after,
        answered_request=claim.redelivery_requested_at if answers_request else None,
        counted=recording_hooks.rollup_changes(
            webhook_id=claim.webhook_id,
            created_at=claim.created_at,
            status_before=claim.state.status,
            status_after=after.status,
            first_attempt_at=claim.first_attempt_at,
            completed_at=after.completed_at,
        ),
    )


def _outcome(done: Finished, attempt_number: int, after: DeliveryState) -> AttemptOutcome:
    claim, result = done.claim, done.result
    return recording_hooks.outcome_of(
        delivery_id=claim.delivery_id,
        trigger=claim.trigger.value,
        attempt_number=attempt_number,
        status_code=result.status_code,
        error=result.error,
        started_at=result.started_at,
        finished_at=result.started_at + timedelta(milliseconds=result.duration_ms),
        due_at=claim.state.next_attempt_at,
        status_before=claim.state.status,
        status_after=after.status,
    )


def _due_again(
    state: DeliveryState, redelivery_requested_at: datetime | None, now: datetime
) -> bool:
    if redelivery_requested_at is not None:
        return True
    return (
        state.status in policy.OPEN_STATUSES
        and state.next_attempt_at is not None
        and state.next_attempt_at <= now
    )
