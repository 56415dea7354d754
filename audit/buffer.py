"""Audit rows of API calls are written in small batches, off the request's critical path.

A request appends its row here; a flusher thread writes the batch every
AUDIT_FLUSH_INTERVAL_SECONDS (and at once when a batch fills up, before any audit read in
this process, and at exit). A row waits at most about one interval. An interval of 0 writes
each row at the end of its own request.
"""

import atexit
import logging
import os
import threading
import time
from typing import Any

import psycopg
from django.conf import settings
from django.db import close_old_connections, connection, transaction

from audit.models import AuditRecord, new_audit_ids
from gshost import process_state
from gshost.pg_copy import copy_into

logger = logging.getLogger(__name__)

BATCH_SIZE = 500
_PREPARED_TYPES = {"DateTimeField", "GenericIPAddressField"}
MAX_PENDING = 50_000
# COPY's text format: NULL is \N, and these characters in a value are backslash-escaped.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_COPY_SPECIALS = ("\\", "\t", "\n", "\r")
_COPY_NULL = "\\N"


class AuditBuffer:
    def __init__(self) -> None:
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._flusher: threading.Thread | None = None

    def add(self, row: dict[str, Any]) -> None:
        """Queue one row's field values; the model instance is built when it is written."""
        interval = settings.AUDIT_FLUSH_INTERVAL_SECONDS
        if interval <= 0:
            AuditRecord.objects.create(**row)
            return
        with self._lock:
            self._rows.append(row)
            full = len(self._rows) >= BATCH_SIZE
            self._ensure_flusher(interval)
        if full:
            self.flush()

    def flush(self) -> int:
        with self._lock:
            rows, self._rows = self._rows, []
        if not rows:
            return 0
        try:
            _insert(rows)
        except Exception:
            logger.exception(
                "Could not write %d audit rows; keeping them for the next flush", len(rows)
            )
            with self._lock:
                self._rows = (rows + self._rows)[-MAX_PENDING:]
            return 0
        return len(rows)

    def reset(self) -> None:
        """Drop the rows not written yet (tests); a running flusher keeps running."""
        with self._lock:
            self._rows = []

    def adopt_after_fork(self) -> None:
        """A forked worker starts with its own, empty buffer and no flusher thread yet."""
        self._lock = threading.Lock()
        self._rows, self._flusher = [], None

    def _ensure_flusher(self, interval: float) -> None:
        if self._flusher is not None:  # a flusher that stops clears this itself (see _run)
            return
        self._flusher = threading.Thread(
            target=self._run, args=(interval,), name="audit-flusher", daemon=True
        )
        self._flusher.start()

    def _run(self, interval: float) -> None:
        try:
            while True:
                time.sleep(interval)
                self.flush()
                close_old_connections()
        finally:
            with self._lock:
                if self._flusher is threading.current_thread():
                    self._flusher = None


def _row_values(rows: list[dict[str, Any]], ids: list[str], fields: list[Any]) -> list[list[Any]]:
    """Column values in field order, with Django's preparation for the few fields that need it."""
    defaults = {f.attname: f.get_default() for f in fields if f.attname != "id"}
    prepared = _prepared_fields(fields)
    values = []
    for row_id, row in zip(ids, rows, strict=True):
        full = {**defaults, "id": row_id, **row}
        for f in prepared:
            full[f.attname] = f.get_db_prep_save(full[f.attname], connection)
        values.append([full[f.attname] for f in fields])
    return values


def _prepared_fields(fields: list[Any]) -> list[Any]:
    return [f for f in fields if f.get_internal_type() in _PREPARED_TYPES]


def _copy_block(rows: list[dict[str, Any]], ids: list[str], fields: list[Any]) -> str:
    """The rows in COPY's text format, columns in field order. Built column by column: the
    checks for NULLs and escapes are then one scan per column instead of one per value."""
    columns = []
    for f in fields:
        if f.attname == "id":
            columns.append(ids)
        else:
            default = f.get_default()
            columns.append(_copy_texts([row.get(f.attname, default) for row in rows]))
    block = "".join([line + "\n" for line in map("\t".join, zip(*columns, strict=True))])
    if "\x00" in block:  # refused as psycopg's own dumper does; the server would refuse it too
        raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
    return block


def _copy_texts(values: list[Any]) -> list[str]:
    """One column's values as str() gives them (a datetime: `2025-01-02 03:04:05.678901+00:00`),
    unless it holds a NULL or a character COPY treats specially: then each one is escaped."""
    texts = list(map(str, values))
    joined = "".join(texts)
    if None in values or any(special in joined for special in _COPY_SPECIALS):
        return list(map(_copy_value, values))
    return texts


def _copy_value(value: Any) -> str:
    return _COPY_NULL if value is None else str(value).translate(_COPY_ESCAPES)


def _insert(rows: list[dict[str, Any]]) -> None:
    """Write rows without building model instances: COPY on PostgreSQL, else multi-row INSERT."""
    fields = list(AuditRecord._meta.concrete_fields)
    ids = new_audit_ids(len(rows))
    if connection.vendor == "postgresql":
        _copy_in(fields, _copy_block(rows, ids, fields))
    else:
        _insert_values(fields, _row_values(rows, ids, fields))


def _copy_in(fields: list[Any], block: str) -> None:
    with transaction.atomic(), copy_into(AuditRecord, [f.column for f in fields]) as copy:
        copy.write(block)


def _insert_values(fields: list[Any], values: list[list[Any]]) -> None:
    quote = connection.ops.quote_name
    table = quote(AuditRecord._meta.db_table)
    columns = ", ".join(quote(f.column) for f in fields)
    one_row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    with transaction.atomic(), connection.cursor() as cursor:
        for start in range(0, len(values), BATCH_SIZE):
            batch = values[start : start + BATCH_SIZE]
            # Only model metadata is interpolated; every value goes through placeholders.
            sql = f"INSERT INTO {table} ({columns}) VALUES {', '.join([one_row] * len(batch))}"  # noqa: S608
            cursor.execute(sql, [value for row_values in batch for value in row_values])


audit_buffer = AuditBuffer()
atexit.register(audit_buffer.flush)
os.register_at_fork(after_in_child=audit_buffer.adopt_after_fork)


process_state.register(
    "audit.buffer",
    bound=f"rows of at most a flush interval, {BATCH_SIZE} at a time; after a failed write "
    f"at most {MAX_PENDING:,} kept; one flusher thread",
    reset=audit_buffer.reset,
)
