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

from django.conf import settings
from django.db import close_old_connections

from audit.models import AuditRecord

logger = logging.getLogger(__name__)

BATCH_SIZE = 500
MAX_PENDING = 50_000


class AuditBuffer:
    def __init__(self) -> None:
        self._rows: list[AuditRecord] = []
        self._lock = threading.Lock()
        self._flusher: threading.Thread | None = None
        self._pid = os.getpid()

    def add(self, row: AuditRecord) -> None:
        interval = settings.AUDIT_FLUSH_INTERVAL_SECONDS
        if interval <= 0:
            row.save(force_insert=True)
            return
        with self._lock:
            self._adopt_after_fork()
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
            AuditRecord.objects.bulk_create(rows, batch_size=BATCH_SIZE)
        except Exception:
            logger.exception(
                "Could not write %d audit rows; keeping them for the next flush", len(rows)
            )
            with self._lock:
                self._rows = (rows + self._rows)[-MAX_PENDING:]
            return 0
        return len(rows)

    def _adopt_after_fork(self) -> None:
        if self._pid != os.getpid():  # a forked worker starts with its own, empty buffer
            self._pid, self._rows, self._flusher = os.getpid(), [], None

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


audit_buffer = AuditBuffer()
atexit.register(audit_buffer.flush)
