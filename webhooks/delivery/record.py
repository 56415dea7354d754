"""Recording finished attempts: each attempt row, its delivery's next state (``policy``),
the endpoint stats' counts, and the lease released, all or nothing: one statement on
PostgreSQL (``write_in_one_statement``), a transaction of a few ORM statements elsewhere.
The state moves only while the claim's lease holds (a row retaken by another worker keeps the
newer holder's state; the attempt is still recorded, as it was made). Once committed,
``recording_hooks`` hears what happened: metrics, and notices of deliveries that just failed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, Final, TypeAlias

from django.db import connection, transaction
from django.db.models import Case, DateTimeField, F, Model, Value, When
from django.utils import timezone

from gshost import process_state
from webhooks.delivery import policy
from webhooks.delivery.claims import Claim
from webhooks.delivery.policy import STATE_FIELDS, DeliveryState
from webhooks.health import recording_hooks, rollup
from webhooks.metrics import AttemptOutcome
from webhooks.models import AttemptTrigger, Delivery, DeliveryAttempt, DeliveryOutcomeCount
from webhooks.targets.transport import AttemptResult


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
    recording_hooks.after_commit(outcomes)


def _write_in_transaction(changes: Sequence[Change]) -> dict[str, tuple[int, bool]]:
    """Elsewhere (SQLite, the demo): a few statements per row. Per delivery still there:
    (attempt number, whether its state moved)."""
    written: dict[str, tuple[int, bool]] = {}
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
                rollup.apply_changes(_rollup(claim, after))
            written[claim.delivery_id] = (number, applied == 1)
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
    result = done.result
    return {
        "trigger": done.claim.trigger.value,
        "started_at": result.started_at,
        "duration_ms": result.duration_ms,
        "status_code": result.status_code,
        "response_body": result.response_body,
        "request_headers": result.request_headers,
        "response_headers": result.response_headers,
        "error": result.error or "",
    }


def _rollup(claim: Claim, after: DeliveryState) -> list[rollup.OutcomeChange]:
    return recording_hooks.rollup_changes(
        webhook_id=claim.webhook_id,
        created_at=claim.created_at,
        status_before=claim.state.status,
        status_after=after.status,
        first_attempt_at=claim.first_attempt_at,
        completed_at=after.completed_at,
    )


def _outcome(done: Finished, number: int, after: DeliveryState) -> AttemptOutcome:
    claim, result = done.claim, done.result
    return recording_hooks.outcome_of(
        delivery_id=claim.delivery_id,
        trigger=claim.trigger.value,
        attempt_number=number,
        status_code=result.status_code,
        error=result.error,
        started_at=result.started_at,
        finished_at=result.started_at + timedelta(milliseconds=result.duration_ms),
        due_at=claim.state.next_attempt_at,
        status_before=claim.state.status,
        status_after=after.status,
    )


# --- PostgreSQL: a batch in one statement -----------------------------------------------------

# An attempt row's columns besides its key, delivery and number (``_attempt_fields``' keys).
_ATTEMPT_FIELDS: Final = tuple(
    field.name
    for field in DeliveryAttempt._meta.concrete_fields
    if field.name not in ("id", "delivery", "number")
)
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
    attempt_columns = ", ".join(quote(name) for name in _ATTEMPT_FIELDS)
    attempt_values = ", ".join(f"b.{quote(name)}" for name in _ATTEMPT_FIELDS)
    batch_columns = [
        ("delivery_id", Delivery, "id"),
        ("lease", Delivery, "lease_expires_at"),
        ("answered_request", Delivery, "redelivery_requested_at"),
        *((name, Delivery, name) for name in STATE_FIELDS),
        *((name, DeliveryAttempt, name) for name in _ATTEMPT_FIELDS),
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
