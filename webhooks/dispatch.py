"""How the rest of the service asks for deliveries to be attempted: after commit, one small
django-q2 task wakes a worker's senders. The rows hold all the state, and idle senders look
for due rows every half second on their own, so a broker outage costs latency, never a delivery and
never an error for the caller."""

from collections.abc import Sequence

from django_q.tasks import async_task

from gshost import handoff


def request_attempts(deliveries: Sequence[tuple[str, str]]) -> None:
    """Queue "attempt these rows now", as (delivery id, webhook id), once the current
    transaction commits."""
    pairs = list(deliveries)
    if pairs:
        handoff.after_commit(async_task, "webhooks.tasks.attempt_deliveries", pairs)
