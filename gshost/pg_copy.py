"""``COPY … FROM STDIN`` on PostgreSQL, for the tables written in bulk on hot paths (audit
rows, delivery attempts): one statement streams every row, no model instances are built."""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
from django.db import connection, models


@contextmanager
def copy_into(model: type[models.Model], columns: Sequence[str]) -> Iterator[psycopg.Copy]:
    """A psycopg ``Copy`` into ``model``'s table; write with ``write`` (COPY text) or
    ``write_row`` (values psycopg adapts). Runs in the caller's transaction."""
    quote = connection.ops.quote_name
    # Only model metadata is interpolated; the rows travel as COPY data.
    sql = f"COPY {quote(model._meta.db_table)} ({', '.join(quote(c) for c in columns)}) FROM STDIN"
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        yield copy
