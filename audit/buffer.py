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

from django.conf import settings
from django.db import close_old_connections, connection, transaction

from audit.models import AuditRecord, new_audit_id

logger = logging.getLogger(__name__)

BATCH_SIZE = 500
_PREPARED_TYPES = {"DateTimeField", "GenericIPAddressField"}
MAX_PENDING = 50_000


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

    def adopt_after_fork(self) -> None:
        """A forked worker starts with its own, empty buffer and no flusher thread yet."""
        self._lock = threading.Lock()
        self._rows, self._flusher = [], None

    def _ensure_flusher(self, interval: float) -> None:
        if self._flusher is not None and self._flusher.is_alive():
            return
        self._flusher = threading.Thread(
            target=self._run, args=(interval,), name="audit-flusher", daemon=True
        )
        self._flusher.start()

    def _run(self, interval: float) -> None:
        while True:
            time.sleep(interval)
            self.flush()
            close_old_connections()


def _row_values(rows: list[dict[str, Any]], fields: list[Any]) -> list[list[Any]]:
    """Column values in field order. psycopg's COPY adapts datetimes and addresses itself;
    other backends get Django's preparation for the few fields that need it."""
    defaults = {f.attname: f.get_default() for f in fields if f.attname != "id"}
    prepared = [] if connection.vendor == "postgresql" else _prepared_fields(fields)
    values = []
    for row in rows:
        full = {**defaults, "id": new_audit_id(), **row}
        for f in prepared:
            full[f.attname] = f.get_db_prep_save(full[f.attname], connection)
        values.append([full[f.attname] for f in fields])
    return values


def _prepared_fields(fields: list[Any]) -> list[Any]:
    return [f for f in fields if f.get_internal_type() in _PREPARED_TYPES]


def _insert(rows: list[dict[str, Any]]) -> None:
    """Write rows without building model instances: COPY on PostgreSQL, else multi-row INSERT."""
    fields = list(AuditRecord._meta.concrete_fields)
    values = _row_values(rows, fields)
    table = connection.ops.quote_name(AuditRecord._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row_values in values:
                    copy.write_row(row_values)
            return
        one_row = "(" + ", ".join(["%s"] * len(fields)) + ")"
        for start in range(0, len(values), BATCH_SIZE):
            batch = values[start : start + BATCH_SIZE]
            # Only model metadata is interpolated; every value goes through placeholders.
            sql = f"INSERT INTO {table} ({columns}) VALUES {', '.join([one_row] * len(batch))}"  # noqa: S608
            cursor.execute(sql, [value for row_values in batch for value in row_values])


audit_buffer = AuditBuffer()
atexit.register(audit_buffer.flush)
os.register_at_fork(after_in_child=audit_buffer.adopt_after_fork)
