"""The delivery rules, in one place: what counts as success, which errors are final, the
retry plan (when the next automatic attempt is due, and when to give up), and what an attempt
makes of a delivery's state (``after_attempt``).

Pure functions of a row's state and an attempt's outcome; nothing here touches the network
or the database. The recorder applies them to the state each claim returned, then writes the
result.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Final

from django.conf import settings

from webhooks.models import AttemptError, AttemptTrigger, DeliveryStatus

OPEN_STATUSES: Final = (DeliveryStatus.PENDING, DeliveryStatus.RETRY_SCHEDULED)
# Failures that no retry can fix: the delivery fails at once.
FINAL_ERRORS: Final = frozenset(
    {AttemptError.ADDRESS_REJECTED, AttemptError.SIGNING_SECRET_UNUSABLE}
)


def is_success(status_code: int | None, error: str | None) -> bool:
    """A 2xx answer, and nothing went wrong on the way (a redirect is an error)."""
    return error is None and status_code is not None and 200 <= status_code < 300


def error_label(status_code: int | None, error: str | None) -> str:
    """What ``last_error`` says after an attempt: "" on success, the error, or the status."""
    if is_success(status_code, error):
        return ""
    return error or f"status_{status_code}"


@dataclass(frozen=True)
class DeliveryState:
    """What an attempt's outcome moves. Nothing else changes it while a lease is held, so the
    state read when a row is claimed is the one its attempt moves on from."""

    status: str
    next_attempt_at: datetime | None
    automatic_attempts: int
    last_error: str
    completed_at: datetime | None


# The state's columns on ``Delivery``, in this order wherever they are read or written by name.
STATE_FIELDS: Final = tuple(field.name for field in fields(DeliveryState))


def after_attempt(
    state: DeliveryState,
    *,
    trigger: AttemptTrigger,
    status_code: int | None,
    error: str | None,
    now: datetime,
) -> DeliveryState:
    """A delivery's state after one attempt. A redelivery's success settles the delivery and
    its failure leaves the retry plan exactly as it was. An automatic attempt follows the plan:
    success, a final error or the last retry used up settle it, else the next attempt is due
    after the next of ``WEBHOOK_RETRY_DELAYS``. Latency runs to the first success, so
    ``completed_at`` is never moved once set."""
    success = is_success(status_code, error)
    if trigger == AttemptTrigger.REDELIVERY:
        if not success:
            return state
        return replace(
            state,
            status=DeliveryStatus.SUCCESS,
            next_attempt_at=None,
            last_error="",
            completed_at=state.completed_at or now,
        )
    if state.status not in OPEN_STATUSES:
        return state
    attempts_made = state.automatic_attempts + 1
    delays = [float(delay) for delay in settings.WEBHOOK_RETRY_DELAYS]  # after attempt n
    status, next_attempt_at = DeliveryStatus.FAILED, None
    if success:
        status = DeliveryStatus.SUCCESS
    elif error not in FINAL_ERRORS and attempts_made <= len(delays):
        status = DeliveryStatus.RETRY_SCHEDULED
        next_attempt_at = now + timedelta(seconds=delays[attempts_made - 1])
    return DeliveryState(
        status=status,
        next_attempt_at=next_attempt_at,
        automatic_attempts=attempts_made,
        last_error=error_label(status_code, error),
        completed_at=now if success else state.completed_at,
    )
