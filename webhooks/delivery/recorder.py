"""Recording finished attempts: each attempt row and its delivery's new state, in one
transaction per batch, which also gives the leases back.

The ``Recorder`` thread writes what the senders finish within ``RECORD_LINGER_SECONDS`` of each
other as one batch. A finished attempt that is not yet recorded is what a crash would send
again, so the pool stops claiming while ``MAX_FINISHED_UNRECORDED`` of them wait, and a batch
that holds that many is written at once, without the linger: nothing is claimed until it is.
How long attempts actually wait is the ``gshost_webhook_record_delay_seconds`` histogram: the
linger plus a batch's write time, which grows to hundreds of milliseconds while the sender
threads keep the process's GIL busy (docs/performance.md).

Each batch also moves the endpoint stats' outcome counts (``rollup``, one upsert in the same
transaction) and, once committed, tells ``recording_hooks`` what happened: delivery metrics,
and failure notices for deliveries that have just failed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from django.db import connection, transaction
from django.db.models.query import RawQuerySet
from django.utils import timezone

from webhooks import recording_hooks, rollup
from webhooks.delivery import policy
from webhooks.delivery.batch_writes import STATE_FIELDS, write_batch
from webhooks.delivery.claims import Finished
from webhooks.delivery.connections import refresh_connection
from webhooks.metrics import AttemptOutcome
from webhooks.models import AttemptTrigger, Delivery, DeliveryAttempt, DeliveryStatus

logger = logging.getLogger(__name__)

RECORD_BATCH: Final = 200
# Results finishing within this of the first are written together (one transaction).
RECORD_LINGER_SECONDS: Final = 0.01
# Finished, unrecorded attempts at which the pool stops claiming (the crash re-send bound).
# Lower bounds re-sends more tightly and costs throughput (docs/performance.md).
MAX_FINISHED_UNRECORDED: Final = 32
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
        self._results: queue.SimpleQueue[Finished | object] = queue.SimpleQueue()
        self._claims_stop_at = claims_stop_at
        self._on_recorded = on_recorded
        self._on_due_again = on_due_again
        self._thread = threading.Thread(target=self._loop, name="webhook-recorder", daemon=True)
        self._thread.start()

    def put(self, finished: Finished) -> None:
        self._results.put(finished)

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
        until = time.monotonic() + RECORD_LINGER_SECONDS
        while True:
            if item is _STOP:
                return batch, True
            assert isinstance(item, Finished)
            batch.append(item)
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
            due_again = self._record_batch(batch)
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
    """Write each attempt and its delivery's new state in one transaction; release the leases.

    Returns (delivery id, webhook id) of rows that are due again at once (a redelivery asked
    for while another attempt was in flight), so the caller can pick them up without waiting.
    """
    if not finished:
        return []
    now = timezone.now()
    with transaction.atomic():
        ids = {done.claim.delivery_id for done in finished}
        rows = {row.id: row for row in _locked_with_attempt_counts(ids)}
        new_attempts, changed, outcomes, counted = [], {}, [], []
        for done in finished:
            row = rows.get(done.claim.delivery_id)
            if row is None:
                continue  # deleted meanwhile (webhook deleted, history purged)
            row.attempt_count += 1  # type: ignore[attr-defined]
            new_attempts.append(_attempt_values(done, row.attempt_count))  # type: ignore[attr-defined]
            status_before, due_at = row.status, row.next_attempt_at
            if _apply_outcome(row, done, now):
                changed[row.id] = row
                counted.extend(_rollup_changes(row, status_before))
            outcomes.append(_outcome(done, row, status_before, due_at))
        write_batch(attempts=new_attempts, states=changed.values(), counted=counted)
    recording_hooks.after_commit(outcomes)
    return [(row.id, row.webhook_id) for row in changed.values() if _due_again(row, now)]


def _outcome(
    done: Finished, row: Delivery, status_before: str, due_at: datetime | None
) -> AttemptOutcome:
    return recording_hooks.outcome_of(
        delivery_id=row.id,
        trigger=done.claim.trigger.value,
        attempt_number=row.attempt_count,  # type: ignore[attr-defined]
        status_code=done.result.status_code,
        error=done.result.error,
        started_at=done.result.started_at,
        finished_at=done.result.started_at + timedelta(milliseconds=done.result.duration_ms),
        due_at=due_at,
        status_before=status_before,
        status_after=row.status,
    )


def _rollup_changes(row: Delivery, status_before: str) -> list[rollup.OutcomeChange]:
    return recording_hooks.rollup_changes(
        webhook_id=row.webhook_id,
        created_at=row.created_at,
        status_before=status_before,
        status_after=row.status,
        first_attempt_at=row.first_attempt_at,
        completed_at=row.completed_at,
    )


def _due_again(row: Delivery, now: datetime) -> bool:
    if row.redelivery_requested_at is not None:
        return True
    return (
        row.status in policy.OPEN_STATUSES
        and row.next_attempt_at is not None
        and (row.next_attempt_at <= now)
    )


def _locked_with_attempt_counts(ids: Collection[str]) -> RawQuerySet[Delivery]:
    """The rows, locked, each annotated with how many attempts it has (``attempt_count``).

    Plain SQL: building model queries per batch cost more than running them.
    """
    quote = connection.ops.quote_name
    deliveries, attempts = quote(Delivery._meta.db_table), quote(DeliveryAttempt._meta.db_table)
    names = ("id", "webhook_id", "created_at", "first_attempt_at", *STATE_FIELDS)
    columns = ", ".join(f"d.{quote(name)}" for name in names)
    placeholders = ", ".join(["%s"] * len(ids))
    lock = " FOR UPDATE OF d" if connection.features.has_select_for_update_of else ""
    # Only model metadata and placeholders are interpolated.
    sql = (
        f"SELECT {columns}, (SELECT COUNT(*) FROM {attempts} AS a "  # noqa: S608
        f"WHERE a.delivery_id = d.id) AS attempt_count "
        f"FROM {deliveries} AS d WHERE d.id IN ({placeholders}){lock}"
    )
    return Delivery.objects.raw(sql, list(ids))


def _attempt_values(done: Finished, number: int) -> dict[str, Any]:
    result = done.result
    return {
        "delivery_id": done.claim.delivery_id,
        "number": number,
        "trigger": done.claim.trigger.value,
        "started_at": result.started_at,
        "duration_ms": result.duration_ms,
        "status_code": result.status_code,
        "response_body": result.response_body,
        "request_headers": result.request_headers,
        "response_headers": result.response_headers,
        "error": result.error or "",
    }


def _apply_outcome(row: Delivery, done: Finished, now: datetime) -> bool:
    """Move ``row`` to its state after this attempt; False when the row is not ours to move."""
    if row.lease_expires_at != done.claim.lease_expires_at:
        return False  # our lease ran out and another worker holds the row: it decides
    row.lease_expires_at = None
    if done.claim.trigger == AttemptTrigger.REDELIVERY:
        _apply_redelivery(row, done, now)
    elif row.status in policy.OPEN_STATUSES:
        _apply_automatic(row, done, now)
    return True


def _apply_redelivery(row: Delivery, done: Finished, now: datetime) -> None:
    """Success settles the delivery; a failure leaves the retry plan exactly as it was."""
    if row.redelivery_requested_at == done.claim.redelivery_requested_at:
        row.redelivery_requested_at = None  # a newer request, made during the attempt, stays
    if done.result.succeeded:
        row.status = DeliveryStatus.SUCCESS
        row.next_attempt_at = None
        row.last_error = ""
        row.completed_at = row.completed_at or now  # latency runs to the first success


def _apply_automatic(row: Delivery, done: Finished, now: datetime) -> None:
    result = done.result
    row.automatic_attempts += 1
    row.last_error = policy.error_label(result.status_code, result.error)
    step = policy.after_automatic_attempt(
        attempts_made=row.automatic_attempts,
        status_code=result.status_code,
        error=result.error,
        now=now,
    )
    row.status, row.next_attempt_at = step.status, step.next_attempt_at
    if step.status == DeliveryStatus.SUCCESS:
        row.completed_at = now
