"""The delivery rules, in one place: what counts as success, which errors are final, and
the retry plan (when the next automatic attempt is due, and when to give up).

Pure functions of a row's state and an attempt's outcome; nothing here touches the network
or the database, so the recorder applies them inside its transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from django.conf import settings

from webhooks.models import AttemptError, DeliveryStatus

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


def retry_delays() -> list[float]:
    """Seconds after attempt n before attempt n + 1 (``WEBHOOK_RETRY_DELAYS``)."""
    return [float(delay) for delay in settings.WEBHOOK_RETRY_DELAYS]


@dataclass(frozen=True)
class NextStep:
    status: DeliveryStatus
    next_attempt_at: datetime | None


def after_automatic_attempt(
    *, attempts_made: int, status_code: int | None, error: str | None, now: datetime
) -> NextStep:
    """Where a delivery stands after its ``attempts_made``-th automatic attempt."""
    delays = retry_delays()
    if is_success(status_code, error):
        return NextStep(DeliveryStatus.SUCCESS, None)
    if error in FINAL_ERRORS or attempts_made > len(delays):
        return NextStep(DeliveryStatus.FAILED, None)
    delay = timedelta(seconds=delays[attempts_made - 1])
    return NextStep(DeliveryStatus.RETRY_SCHEDULED, now + delay)
