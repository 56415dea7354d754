"""A recorded batch's writes: its attempt rows, its deliveries' new states and the outcome
counts, inside the recorder's transaction.

On PostgreSQL the three go as one statement, each table's rows as array parameters. The
recorder shares its process's GIL with the sender threads, and after every round trip to the
database it queues behind them for the GIL again; on a busy worker that wait, not the
database, is most of a batch's time (docs/performance.md). Elsewhere (SQLite, the demo) each
table gets its own statement.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

from django.db import connection
from django.db.models import Model

from webhooks import rollup
from webhooks.models import Delivery, DeliveryAttempt, DeliveryOutcomeCount

STATE_FIELDS: Final = (
    "status",
    "next_attempt_at",
    "automatic_attempts",
    "lease_expires_at",
    "redelivery_requested_at",
    "last_error",
    "completed_at",
)
ATTEMPT_FIELDS: Final = (
    "delivery_id",
    "number",
    "trigger",
    "started_at",
    "duration_ms",
    "status_code",
    "response_body",
    "request_headers",
    "response_headers",
    "error",
)
_COUNT_FIELDS: Final = ("webhook_id", "hour", "outcome", "latency_bucket", "count")
_JSON_FIELDS: Final = frozenset({"request_headers", "response_headers"})


def write_batch(
    *,
    attempts: Sequence[dict[str, Any]],
    states: Iterable[Delivery],
    counted: Iterable[rollup.OutcomeChange],
) -> None:
    """Insert ``attempts`` (values by ``ATTEMPT_FIELDS``), save each row's ``STATE_FIELDS`` and
    move the outcome counts. Runs in the caller's transaction."""
    rows = list(states)
    totals = rollup.totals(counted)
    if connection.vendor == "postgresql":
        _write_in_one_statement(attempts, rows, totals)
        return
    if attempts:
        DeliveryAttempt.objects.bulk_create(DeliveryAttempt(**values) for values in attempts)
    _save_states(rows)
    if totals:
        rollup.upsert(totals)


def _save_states(rows: Iterable[Delivery]) -> None:
    """One UPDATE per distinct new state: a batch of successes is a single statement."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for row in rows:
        groups.setdefault(tuple(getattr(row, name) for name in STATE_FIELDS), []).append(row.id)
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(name)} = %s" for name in STATE_FIELDS)
    fields = [_field(Delivery, name) for name in STATE_FIELDS]
    with connection.cursor() as cursor:
        for state, ids in groups.items():
            values = [f.get_db_prep_save(v, connection) for f, v in zip(fields, state, strict=True)]
            placeholders = ", ".join(["%s"] * len(ids))
            # Only model metadata and placeholders are interpolated.
            cursor.execute(
                f"UPDATE {quote(Delivery._meta.db_table)} SET {assignments} "  # noqa: S608
                f"WHERE id IN ({placeholders})",
                [*values, *ids],
            )


def _write_in_one_statement(
    attempts: Sequence[dict[str, Any]], rows: Sequence[Delivery], totals: Sequence[rollup.Total]
) -> None:
    state_names = ("id", *STATE_FIELDS)
    attempt_rows = [[_adapted(values, n) for n in ATTEMPT_FIELDS] for values in attempts]
    params = {
        **_arrays("a", ATTEMPT_FIELDS, attempt_rows),
        **_arrays("s", state_names, [[getattr(row, n) for n in state_names] for row in rows]),
        **_arrays("c", _COUNT_FIELDS, totals),
    }
    with connection.cursor() as cursor:
        cursor.execute(_one_statement_sql(), params)


@functools.cache
def _one_statement_sql() -> str:
    """Attempts inserted and states updated in data-modifying CTEs, counts upserted by the
    statement itself; PostgreSQL runs all three, whichever of them has rows."""
    quote = connection.ops.quote_name
    attempts, deliveries = DeliveryAttempt._meta.db_table, Delivery._meta.db_table
    counts = quote(DeliveryOutcomeCount._meta.db_table)
    attempt_columns = ", ".join(_column(DeliveryAttempt, n) for n in ATTEMPT_FIELDS)
    assignments = ", ".join(f"{quote(n)} = s.{quote(n)}" for n in STATE_FIELDS)
    count_columns = ", ".join(_column(DeliveryOutcomeCount, n) for n in _COUNT_FIELDS)
    # Only model metadata is interpolated; every value is a parameter.
    return (
        f"WITH inserted AS (INSERT INTO {quote(attempts)} ({attempt_columns}) "  # noqa: S608
        f"SELECT * FROM {_unnest(DeliveryAttempt, 'a', ATTEMPT_FIELDS)}), "
        f"updated AS (UPDATE {quote(deliveries)} AS d SET {assignments} "
        f"FROM {_unnest(Delivery, 's', ('id', *STATE_FIELDS))} WHERE d.id = s.id) "
        f"INSERT INTO {counts} ({count_columns}) "
        f"SELECT * FROM {_unnest(DeliveryOutcomeCount, 'c', _COUNT_FIELDS)} "
        "ON CONFLICT (webhook_id, hour, outcome, latency_bucket) "
        f"DO UPDATE SET count = {counts}.count + excluded.count"
    )


def _adapted(values: dict[str, Any], name: str) -> Any:
    value = values[name]
    return json.dumps(value) if name in _JSON_FIELDS else value


def _arrays(prefix: str, names: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """One array parameter per column, named ``<prefix>_<column>``."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    return {f"{prefix}_{name}": list(column) for name, column in zip(names, columns, strict=True)}


def _unnest(model: type[Model], prefix: str, names: Sequence[str]) -> str:
    """``unnest(%(p_a)s::type[], …) AS p(a, …)``: the rows of one array parameter per column."""
    arrays = ", ".join(f"%({prefix}_{n})s::{_field(model, n).db_type(connection)}[]" for n in names)
    return f"unnest({arrays}) AS {prefix}({', '.join(_column(model, n) for n in names)})"


def _column(model: type[Model], name: str) -> str:
    return connection.ops.quote_name(_field(model, name).column)


def _field(model: type[Model], name: str) -> Any:
    return model._meta.get_field(name)
