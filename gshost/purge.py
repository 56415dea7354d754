"""Deleting expired rows as a series of short statements."""

from typing import Any

from django.db.models import QuerySet

# Rows one purge statement deletes: a short transaction (tens of milliseconds), so however far
# behind a purge is, it never holds its row locks or a snapshot for long.
PURGE_BATCH_ROWS = 5000


def delete_in_batches(expired: QuerySet[Any], *, batch_rows: int = PURGE_BATCH_ROWS) -> int:
    """Delete the rows of `expired` (ordered oldest first, through an index), `batch_rows` per
    statement, each its own transaction; returns how many went."""
    rows = expired.model._default_manager
    deleted = 0
    while True:
        batch = list(expired.values_list("pk", flat=True)[:batch_rows])
        if batch:
            deleted += rows.filter(pk__in=batch).delete()[0]
        if len(batch) < batch_rows:
            return deleted
