"""django-q2 entry points: thin, they load nothing themselves and call the engine."""

from collections.abc import Sequence

from webhooks import retention
from webhooks.delivery import engine


def attempt_deliveries(deliveries: Sequence[tuple[str, str]]) -> None:
    """Queued after commit by ``dispatch.request_attempts``: "look at these rows now",
    as (delivery id, webhook id) pairs."""
    engine.attempt_deliveries(deliveries)


def purge_delivery_history() -> int:
    """Scheduled hourly: drop deliveries older than the 7-day history."""
    return retention.purge_delivery_history()
