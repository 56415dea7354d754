"""How the rest of the service asks for deliveries to be attempted: after commit, one small
django-q2 task names the rows. The rows hold all the state; a periodic sweep picks up
anything a lost task would have carried, so a lost task costs latency, never a delivery."""

from collections.abc import Sequence

from django.db import transaction
from django_q.tasks import async_task


def request_attempts(deliveries: Sequence[tuple[str, str]]) -> None:
    """Queue "attempt these rows now", as (delivery id, webhook id), once the current
    transaction commits. The webhook lets the worker share out its senders without a query."""
    pairs = list(deliveries)
    if pairs:
        transaction.on_commit(lambda: async_task("webhooks.tasks.attempt_deliveries", pairs))
