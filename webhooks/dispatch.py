"""How the rest of the service asks for deliveries to be attempted: after commit, one small
django-q2 task names the rows. The rows hold all the state; a periodic sweep picks up
anything a lost task would have carried, so a lost task costs latency, never a delivery."""

from collections.abc import Sequence

from django.db import transaction
from django_q.tasks import async_task


def request_attempts(delivery_ids: Sequence[str]) -> None:
    """Queue "attempt these rows now" once the current transaction commits."""
    ids = list(delivery_ids)
    if ids:
        transaction.on_commit(lambda: async_task("webhooks.tasks.attempt_deliveries", ids))
