"""Recording finished attempts: each attempt row, its delivery's next state (``policy``),
the endpoint stats' counts, and the lease released, all or nothing: one statement on
PostgreSQL (``write_in_one_statement``), a transaction of a few ORM statements elsewhere
(``_write_in_transaction``). Both write the columns named once here (``ATTEMPT_COLUMNS``) and
in ``policy`` (``STATE_FIELDS``). The state moves only while the claim's lease holds (a row
retaken by another worker keeps the newer holder's state; the attempt is still recorded, as it
was made). Once committed: the metrics, and notices of deliveries that just failed.

Why two spellings: bench/delivery_spellings.py times both on PostgreSQL in one run.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, Final, TypeAlias

from django.db import connection, transaction
from django.db.models import Case, DateTimeField, F, Model, Value, When
from django.utils import timezone

from gshost import process_state
from webhooks import metrics
from webhooks.delivery import policy
from webhooks.delivery.claims import Claim
from webhooks.delivery.policy import STATE_FIELDS, DeliveryState
from webhooks.health import notices, rollup
from webhooks.metrics import AttemptOutcome
from webhooks.models import (
    AttemptTrigger,
    Delivery,
    DeliveryAttempt,
    DeliveryOutcomeCount,
    DeliveryStatus,
)
from webhooks.targets.transport import AttemptResult

logger = logging.getLogger(__name__)

# An attempt row's columns besides its key, delivery and number, from the model: what both
# spellings write. Each is the attempt result's field of the same name, but the trigger (the
# claim's) and the error ("" for none).
ATTEMPT_COLUMNS: Final = tuple(
    field.name
    for field in DeliveryAttempt._meta.concrete_fields
    if field.name not in ("id", "delivery", "number")
)


@dataclass(frozen=True)
class Finished:
    claim: Claim
    result: AttemptResult


Change: TypeAlias = tuple[Finished, DeliveryState]  # an attempt and the state it leads to


def record_attempts(finished: Sequence[Finished]) -> None:
    """Write the attempts (each delivery at most once) and their deliveries' new states, all
    or nothing; then tell the hooks. Deliveries deleted meanwhile are skipped."""
    if not finished:
        return
    now = timezone.now()
    changes = [(done, _next_state(done, now)) for done in finished]
    if connection.vendor == "postgresql":
        written = write_in_one_statement(changes)
    else:
        written = _write_in_transaction(changes)
    outcomes = [
        _outcome(done, number, after if applied else done.claim.state)
        for done, after in changes
        if (found := written.get(done.claim.delivery_id)) is not None
        for number, applied in [found]
    ]
    _after_commit(outcomes)


def _after_commit(outcomes: Sequence[AttemptOutcome]) -> None:
    """Metrics, then the failure notices; never raises (the rows are committed)."""
    try:
        metrics.attempts_recorded(outcomes)
    except Exception:
        logger.exception("Could not count webhook attempts")
    failed = [o.delivery_id for o in outcomes if o.settled_as == DeliveryStatus.FAILED]
    if failed:
        notices.deliveries_failed(failed)


def _write_in_transaction(changes: Sequence[Change]) -> dict[str, tuple[int, bool]]:
    """Elsewhere (SQLite, the demo): a few statements per row. Per delivery still there:
    (attempt number, whether its state moved)."""
    written: dict[str, tuple[int, bool]] = {}
    counted: list[rollup.OutcomeChange] = []
    with transaction.atomic():
        for done, after in changes:
            claim = done.claim
            row = Delivery.objects.filter(id=claim.delivery_id)
            if not row.exists():
                continue  # deleted with its webhook, or purged
            number = DeliveryAttempt.objects.filter(delivery_id=claim.delivery_id).count() + 1
            DeliveryAttempt.objects.create(
                delivery_id=claim.delivery_id, number=number, **_attempt_fields(done)
            )
            answered = When(redelivery_requested_at=_answered(claim), then=Value(None))
            applied = row.filter(lease_expires_at=claim.lease_expires_at).update(
                **asdict(after),
                lease_expires_at=None,
                redelivery_requested_at=Case(
                    answered, default=F("redelivery_requested_at"), output_field=DateTimeField()
                ),
            )
            if applied:  # else retaken by another worker: its holder moves the state
                counted += _rollup(claim, after)
            written[claim.delivery_id] = (number, applied == 1)
        rollup.apply_changes(counted)  # summed over the batch, as in one statement
    return written


def _next_state(done: Finished, now: datetime) -> DeliveryState:
    return policy.after_attempt(
        done.claim.state,
        trigger=done.claim.trigger,
        status_code=done.result.status_code,
        error=done.result.error,
        now=now,
    )


def _answered(claim: Claim) -> datetime | None:
    """The redelivery request this attempt answers; one asked for meanwhile stays."""
    return claim.redelivery_requested_at if claim.trigger == AttemptTrigger.REDELIVERY else None


def _attempt_fields(done: Finished) -> dict[str, Any]:
    """The attempt row's ``ATTEMPT_COLUMNS``."""
    own = {"trigger": done.claim.trigger.value, "error": done.result.error or ""}
    return {
        name: own[name] if name in own else getattr(done.result, name) for name in ATTEMPT_COLUMNS
    }


def _rollup(claim: Claim, after: DeliveryState) -> list[rollup.OutcomeChange]:
    """The endpoint stats' count changes when this attempt settles its delivery."""
    latency = None
    if after.completed_at is not None and claim.first_attempt_at is not None:
        latency = (after.completed_at - claim.first_attempt_at).total_seconds() * 1000
    return rollup.settled_changes(
        webhook_id=claim.webhook_id,
        created_at=claim.created_at,
        before=claim.state.status,
        after=after.status,
        latency_ms=latency,
    )


def _outcome(done: Finished, number: int, after: DeliveryState) -> AttemptOutcome:
    """The attempt for the metrics; the lag is kept for a delivery's first automatic attempt
    only."""
    claim, result = done.claim, done.result
    first = number == 1 and claim.trigger == AttemptTrigger.AUTOMATIC
    settled = after.status != claim.state.status and after.status in metrics.SETTLED
    return AttemptOutcome(
        trigger=claim.trigger.value,
        status_code=result.status_code,
        error=result.error,
        due_at=claim.state.next_attempt_at if first else None,
        started_at=result.started_at if first else None,
        settled_as=after.status if settled else None,
        delivery_id=claim.delivery_id,
        finished_at=result.started_at + timedelta(milliseconds=result.duration_ms),
    )


# --- PostgreSQL: a batch in one statement -----------------------------------------------------

_COUNT_KEYS: Final = ("delivery_id", "webhook_id", "hour", "outcome", "latency_bucket", "count")


def write_in_one_statement(changes: Sequence[Change]) -> dict[str, tuple[int, bool]]:
    """The batch's rows and counts each passed as one JSON document (libpq escapes one string;
    Django quoting each element of array parameters in Python cost more than the write)."""
    batch = [
        {
            "delivery_id": done.claim.delivery_id,
            "lease": done.claim.lease_expires_at,
            "answered_request": _answered(done.claim),
            **asdict(after),
            **_attempt_fields(done),
        }
        for done, after in changes
    ]
    counts = [
        dict(zip(_COUNT_KEYS, (done.claim.delivery_id, *total), strict=True))
        for done, after in changes
        for total in rollup.totals(_rollup(done.claim, after))
    ]
    with connection.cursor() as cursor:
        cursor.execute(_one_statement_sql(), {"b": _json(batch), "c": _json(counts)})
        return {delivery_id: (number, applied) for delivery_id, number, applied in cursor}


@functools.cache
def _one_statement_sql() -> str:
    """The state ``UPDATE``, the attempts' ``INSERT`` and the counts' upsert as data-modifying
    CTEs (PostgreSQL runs them whether or not they are read); the counts of rows whose lease
    ran out are left out."""
    quote = connection.ops.quote_name
    attempts, deliveries = quote(DeliveryAttempt._meta.db_table), quote(Delivery._meta.db_table)
    counts = quote(DeliveryOutcomeCount._meta.db_table)
    assignments = ", ".join(f"{quote(name)} = b.{quote(name)}" for name in STATE_FIELDS)
    attempt_columns = ", ".join(quote(name) for name in ATTEMPT_COLUMNS)
    attempt_values = ", ".join(f"b.{quote(name)}" for name in ATTEMPT_COLUMNS)
    batch_columns = [
        ("delivery_id", Delivery, "id"),
        ("lease", Delivery, "lease_expires_at"),
        ("answered_request", Delivery, "redelivery_requested_at"),
        *((name, Delivery, name) for name in STATE_FIELDS),
        *((name, DeliveryAttempt, name) for name in ATTEMPT_COLUMNS),
    ]
    count_columns = [("delivery_id", Delivery, "id")] + [
        (name, DeliveryOutcomeCount, name) for name in _COUNT_KEYS[1:]
    ]
    key = "c.webhook_id, c.hour, c.outcome, c.latency_bucket"
    # Only model metadata is interpolated; every value is a parameter.
    return (
        f"WITH b AS (SELECT * FROM {_recordset('b', batch_columns)}), "  # noqa: S608
        f"updated AS (UPDATE {deliveries} AS d SET {assignments}, lease_expires_at = NULL, "
        "redelivery_requested_at = CASE WHEN d.redelivery_requested_at = b.answered_request "
        "THEN NULL ELSE d.redelivery_requested_at END "
        "FROM b WHERE d.id = b.delivery_id AND d.lease_expires_at = b.lease RETURNING d.id), "
        f"inserted AS (INSERT INTO {attempts} (delivery_id, number, {attempt_columns}) "
        f"SELECT b.delivery_id, 1 + (SELECT COUNT(*) FROM {attempts} AS a "
        f"WHERE a.delivery_id = b.delivery_id), {attempt_values} FROM b "
        f"WHERE EXISTS (SELECT 1 FROM {deliveries} AS d WHERE d.id = b.delivery_id) "
        "RETURNING delivery_id, number), "
        f"counted AS (INSERT INTO {counts} (webhook_id, hour, outcome, latency_bucket, count) "
        f"SELECT {key}, SUM(c.count) FROM {_recordset('c', count_columns)} "
        f"WHERE c.delivery_id IN (SELECT id FROM updated) GROUP BY {key} "
        f"HAVING SUM(c.count) <> 0 ORDER BY {key} "
        "ON CONFLICT (webhook_id, hour, outcome, latency_bucket) "
        f"DO UPDATE SET count = {counts}.count + excluded.count) "
        "SELECT i.delivery_id, i.number, u.id IS NOT NULL "
        "FROM inserted AS i LEFT JOIN updated AS u ON u.id = i.delivery_id"
    )


def _recordset(name: str, columns: Sequence[tuple[str, type[Model], str]]) -> str:
    """``json_to_recordset(%(name)s::json) AS name(column type, …)``: one row per object."""
    quote = connection.ops.quote_name
    definition = ", ".join(
        f"{quote(column)} {model._meta.get_field(field).db_type(connection)}"
        for column, model, field in columns
    )
    return f"json_to_recordset(%({name})s::json) AS {name}({definition})"


def _json(rows: list[dict[str, Any]]) -> str:
    # Timestamps keep their microseconds and offset, so a lease compares equal to the row's.
    return json.dumps(rows, default=datetime.isoformat, separators=(",", ":"))


process_state.register(
    "webhooks.record_sql", bound="one SQL statement", reset=_one_statement_sql.cache_clear
)
