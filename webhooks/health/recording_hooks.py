"""What recording an attempt tells the rest of the service, in plain values.

The engine calls ``outcome_of`` and ``rollup_changes`` for each attempt it records, writes the
rollup changes of the rows that moved with the batch (``delivery.record``), and hands the
outcomes to ``after_commit`` once the batch has committed: delivery metrics, and failure
notices to the owners of deliveries that have just failed. Nothing here can fail the recording.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from webhooks import metrics
from webhooks.health import notices, rollup
from webhooks.metrics import AttemptOutcome
from webhooks.models import AttemptTrigger, DeliveryStatus

logger = logging.getLogger(__name__)


def outcome_of(
    *,
    delivery_id: str,
    trigger: str,
    attempt_number: int,
    status_code: int | None,
    error: str | None,
    started_at: datetime,
    finished_at: datetime,
    due_at: datetime | None,
    status_before: str,
    status_after: str,
) -> AttemptOutcome:
    """One recorded attempt; the lag is kept for a delivery's first automatic attempt only."""
    first = attempt_number == 1 and trigger == AttemptTrigger.AUTOMATIC
    settled = status_after != status_before and status_after in metrics.SETTLED
    return AttemptOutcome(
        trigger=str(trigger),
        status_code=status_code,
        error=error,
        due_at=due_at if first else None,
        started_at=started_at if first else None,
        settled_as=status_after if settled else None,
        delivery_id=delivery_id,
        finished_at=finished_at,
    )


def rollup_changes(
    *,
    webhook_id: str,
    created_at: datetime,
    status_before: str,
    status_after: str,
    first_attempt_at: datetime | None,
    completed_at: datetime | None,
) -> list[rollup.OutcomeChange]:
    latency = None
    if completed_at is not None and first_attempt_at is not None:
        latency = (completed_at - first_attempt_at).total_seconds() * 1000
    return rollup.settled_changes(
        webhook_id=webhook_id,
        created_at=created_at,
        before=status_before,
        after=status_after,
        latency_ms=latency,
    )


def after_commit(outcomes: Sequence[AttemptOutcome]) -> None:
    """Metrics, then the failure notices; never raises."""
    try:
        metrics.attempts_recorded(outcomes)
    except Exception:
        logger.exception("Could not count webhook attempts")
    failed = [o.delivery_id for o in outcomes if o.settled_as == DeliveryStatus.FAILED]
    if failed:
        notices.deliveries_failed(failed)
