"""A recorded batch's writes: each attempt row, its delivery's new state (which gives the lease
back) and the outcome counts, all or nothing.

Each row's change is decided beforehand, from the state its claim returned
(``policy.after_attempt``), and applies only where the row still carries that claim's lease:
a worker whose lease ran out records its attempt and moves nothing. A redelivery request
answered by the attempt is cleared unless a newer one came meanwhile.

On PostgreSQL a batch is one statement, its rows one JSON parameter: Django's client-side
binding quotes every element of an array parameter in Python, which cost the recorder more
than the rest of a batch, while one string is escaped by libpq. The recorder shares its
process's GIL with the sender threads and queues behind them for it after every round trip to
the database; on a busy worker that wait, not the database, was most of a batch's time
(docs/performance.md). Elsewhere (SQLite, the demo) a transaction runs a few
statements per row.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Final

from django.db import connection, transaction
from django.db.models import Case, DateTimeField, F, Model, Value, When

from webhooks.delivery.policy import STATE_FIELDS, DeliveryState
from webhooks.health import rollup
from webhooks.models import Delivery, DeliveryAttempt, DeliveryOutcomeCount

_ATTEMPT_FIELDS: Final = (
    "trigger",
    "started_at",
    "duration_ms",
    "status_code",
    "response_body",
    "request_headers",
    "response_headers",
    "error",
)
# The keys of a count row: the delivery it belongs to, then ``rollup.Total``'s fields.
_COUNT_KEYS: Final = ("delivery_id", "webhook_id", "hour", "outcome", "latency_bucket", "count")


@dataclass(frozen=True)
class RowChange:
    """What recording one attempt writes. At most one per delivery in a batch."""

    delivery_id: str
    lease: datetime  # the claim's: the change applies only while the row still carries it
    attempt: dict[str, Any]  # the attempt row's ``_ATTEMPT_FIELDS``; its number is the next one
    state: DeliveryState
    answered_request: datetime | None  # the redelivery request this attempt was made for
    counted: list[rollup.OutcomeChange] = field(default_factory=list)  # if the change applies


@dataclass(frozen=True)
class Written:
    attempt_number: int
    applied: bool  # False: the lease had run out; the attempt is recorded, nothing else moved
    redelivery_requested_at: datetime | None  # the row's, afterwards (a newer request stays)


def write_batch(changes: Sequence[RowChange]) -> list[Written | None]:
    """Write every change, all or nothing; for each, what was written (None: the delivery is
    gone, deleted with its webhook or purged)."""
    if not changes:
        return []
    if connection.vendor == "postgresql":
        return _write_in_one_statement(changes)
    with transaction.atomic():
        written = [_write_row(change) for change in changes]
        applied = zip(changes, written, strict=True)
        rollup.apply_changes(c for change, w in applied if w and w.applied for c in change.counted)
    return written


# --- elsewhere: a few statements per row, in one transaction ----------------------------------


def _write_row(change: RowChange) -> Written | None:
    row = Delivery.objects.filter(id=change.delivery_id)
    if not row.exists():
        return None
    number = DeliveryAttempt.objects.filter(delivery_id=change.delivery_id).count() + 1
    DeliveryAttempt.objects.create(delivery_id=change.delivery_id, number=number, **change.attempt)
    answered = When(redelivery_requested_at=change.answered_request, then=Value(None))
    applied = row.filter(lease_expires_at=change.lease).update(
        **asdict(change.state),
        lease_expires_at=None,
        redelivery_requested_at=Case(
            answered, default=F("redelivery_requested_at"), output_field=DateTimeField()
        ),
    )
    request = row.values_list("redelivery_requested_at", flat=True).get() if applied else None
    return Written(attempt_number=number, applied=applied == 1, redelivery_requested_at=request)


# --- PostgreSQL: one statement ----------------------------------------------------------------


def _write_in_one_statement(changes: Sequence[RowChange]) -> list[Written | None]:
    batch = [
        {
            "delivery_id": change.delivery_id,
            "lease": change.lease,
            "answered_request": change.answered_request,
            **{name: getattr(change.state, name) for name in STATE_FIELDS},
            # Named, not copied whole: json_to_recordset would read a missing field as NULL.
            **{name: change.attempt[name] for name in _ATTEMPT_FIELDS},
        }
        for change in changes
    ]
    counts = [
        dict(zip(_COUNT_KEYS, (change.delivery_id, *total), strict=True))
        for change in changes
        for total in rollup.totals(change.counted)
    ]
    params = {"b": _json(batch), "c": _json(counts)}
    with connection.cursor() as cursor:
        cursor.execute(_one_statement_sql(), params)
        found = {delivery_id: Written(*written) for delivery_id, *written in cursor.fetchall()}
    return [found.get(change.delivery_id) for change in changes]


@functools.cache
def _one_statement_sql() -> str:
    """The batch's rows as ``b`` and its counts as ``c``, each passed as one JSON document;
    the state ``UPDATE``, the attempts' ``INSERT`` and the counts' upsert as data-modifying
    CTEs, which PostgreSQL runs whether or not they are read. The counts of rows whose lease
    ran out are left out."""
    quote = connection.ops.quote_name
    attempts, deliveries = quote(DeliveryAttempt._meta.db_table), quote(Delivery._meta.db_table)
    counts = quote(DeliveryOutcomeCount._meta.db_table)
    assignments = ", ".join(f"{quote(name)} = b.{quote(name)}" for name in STATE_FIELDS)
    attempt_columns = ", ".join(quote(name) for name in _ATTEMPT_FIELDS)
    attempt_values = ", ".join(f"b.{quote(name)}" for name in _ATTEMPT_FIELDS)
    key = "c.webhook_id, c.hour, c.outcome, c.latency_bucket"
    # Only model metadata is interpolated; every value is a parameter.
    return (
        f"WITH b AS (SELECT * FROM {_recordset('b', _batch_columns())}), "  # noqa: S608
        f"updated AS (UPDATE {deliveries} AS d SET {assignments}, lease_expires_at = NULL, "
        "redelivery_requested_at = CASE WHEN d.redelivery_requested_at = b.answered_request "
        "THEN NULL ELSE d.redelivery_requested_at END "
        "FROM b WHERE d.id = b.delivery_id AND d.lease_expires_at = b.lease "
        "RETURNING d.id, d.redelivery_requested_at), "
        f"inserted AS (INSERT INTO {attempts} (delivery_id, number, {attempt_columns}) "
        f"SELECT b.delivery_id, 1 + (SELECT COUNT(*) FROM {attempts} AS a "
        f"WHERE a.delivery_id = b.delivery_id), {attempt_values} FROM b "
        f"WHERE EXISTS (SELECT 1 FROM {deliveries} AS d WHERE d.id = b.delivery_id) "
        "RETURNING delivery_id, number), "
        f"counted AS (INSERT INTO {counts} (webhook_id, hour, outcome, latency_bucket, count) "
        f"SELECT {key}, SUM(c.count) FROM {_recordset('c', _count_columns())} "
        f"WHERE c.delivery_id IN (SELECT id FROM updated) GROUP BY {key} "
        f"HAVING SUM(c.count) <> 0 ORDER BY {key} "
        "ON CONFLICT (webhook_id, hour, outcome, latency_bucket) "
        f"DO UPDATE SET count = {counts}.count + excluded.count) "
        "SELECT i.delivery_id, i.number, u.id IS NOT NULL, u.redelivery_requested_at "
        "FROM inserted AS i LEFT JOIN updated AS u ON u.id = i.delivery_id"
    )


@functools.cache
def _batch_columns() -> list[tuple[str, str]]:
    """(name, type) of ``b``'s columns: the row, its change, its attempt."""
    return [
        ("delivery_id", _db_type(Delivery, "id")),
        ("lease", _db_type(Delivery, "lease_expires_at")),
        ("answered_request", _db_type(Delivery, "redelivery_requested_at")),
        *((name, _db_type(Delivery, name)) for name in STATE_FIELDS),
        *((name, _db_type(DeliveryAttempt, name)) for name in _ATTEMPT_FIELDS),
    ]


@functools.cache
def _count_columns() -> list[tuple[str, str]]:
    return [("delivery_id", _db_type(Delivery, "id"))] + [
        (name, _db_type(DeliveryOutcomeCount, name)) for name in _COUNT_KEYS[1:]
    ]


def _db_type(model: type[Model], name: str) -> str:
    return str(model._meta.get_field(name).db_type(connection))


def _json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, default=_isoformat, separators=(",", ":"))


def _isoformat(value: object) -> str:
    """Timestamps keep their microseconds and offset, so a lease compares equal to the row's."""
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _recordset(name: str, columns: list[tuple[str, str]]) -> str:
    """``json_to_recordset(%(name)s::json) AS name(column type, …)``: one row per object."""
    quote = connection.ops.quote_name
    definition = ", ".join(f"{quote(column)} {db_type}" for column, db_type in columns)
    return f"json_to_recordset(%({name})s::json) AS {name}({definition})"
