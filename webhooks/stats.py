"""An endpoint's health over a recent window, read from its delivery rows.

Counts come from one grouped query over the ``delivery_stats`` index (webhook, created_at,
including status and the two timing columns), which PostgreSQL answers by an index-only scan.
Latency is the time from the claim of a delivery's first attempt to the recording of its
success, so retries count in it; its percentiles are interpolated like ``percentile_cont``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from django.db import connection
from django.db.models import Count, DateTimeField, Q, QuerySet
from django.db.models.functions import Trunc
from django.utils import timezone

from webhooks.models import Delivery, DeliveryStatus

MIN_WINDOW: Final = timedelta(hours=1)
MAX_WINDOW: Final = timedelta(days=7)
DEFAULT_WINDOW: Final = "24h"
# Beyond this, one bucket per day instead of one per hour.
HOURLY_UP_TO: Final = timedelta(hours=48)
_WINDOW: Final = re.compile(r"([1-9][0-9]{0,3})([hd])")
_OPEN: Final = (DeliveryStatus.PENDING, DeliveryStatus.RETRY_SCHEDULED)


class InvalidWindow(ValueError):
    """The window is not `<n>h` or `<n>d` between 1h and 7d."""


@dataclass(frozen=True)
class Bucket:
    at: datetime
    succeeded: int = 0
    failed: int = 0


@dataclass(frozen=True)
class WebhookStats:
    window: str
    deliveries: int
    succeeded: int
    failed: int
    pending: int
    latency_p50_ms: int | None
    latency_p95_ms: int | None
    series: list[Bucket] = field(default_factory=list)

    @property
    def success_rate(self) -> float | None:
        """Of the deliveries that are settled (succeeded or failed); None when none is."""
        settled = self.succeeded + self.failed
        return round(self.succeeded / settled, 4) if settled else None


def parse_window(text: str) -> timedelta:
    match = _WINDOW.fullmatch(text)
    if match is None:
        raise InvalidWindow(text)
    count, unit = int(match[1]), match[2]
    window = timedelta(hours=count) if unit == "h" else timedelta(days=count)
    if not MIN_WINDOW <= window <= MAX_WINDOW:
        raise InvalidWindow(text)
    return window


def bucket_size(window: timedelta) -> str:
    return "hour" if window <= HOURLY_UP_TO else "day"


def _floor(moment: datetime, size: str) -> datetime:
    moment = moment.replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0) if size == "day" else moment


def _empty_series(start: datetime, now: datetime, size: str) -> list[datetime]:
    step = timedelta(hours=1) if size == "hour" else timedelta(days=1)
    moments, moment = [], _floor(start, size)
    while moment <= now:
        moments.append(moment)
        moment += step
    return moments


def webhook_stats(
    webhook_id: str, window_text: str, *, now: datetime | None = None
) -> WebhookStats:
    """The health of ``webhook_id`` over the last ``window_text`` (`1h`-`7d`)."""
    window = parse_window(window_text)
    now = now or timezone.now()
    start, size = now - window, bucket_size(window)
    rows = Delivery.objects.filter(webhook_id=webhook_id, created_at__gte=start)
    counts: dict[tuple[datetime, str], int] = {}
    grouped = (
        rows.annotate(bucket=Trunc("created_at", size, output_field=DateTimeField()))
        .values_list("bucket", "status")
        .annotate(n=Count("*"))
        .order_by()
    )
    for bucket, status, n in grouped:
        counts[(bucket, status)] = n
    series = [
        Bucket(
            at=moment,
            succeeded=counts.get((moment, DeliveryStatus.SUCCESS), 0),
            failed=counts.get((moment, DeliveryStatus.FAILED), 0),
        )
        for moment in _empty_series(start, now, size)
    ]
    by_status: dict[str, int] = {}
    for (_, status), n in counts.items():
        by_status[status] = by_status.get(status, 0) + n
    p50, p95 = _latency_percentiles(rows)
    return WebhookStats(
        window=window_text,
        deliveries=sum(by_status.values()),
        succeeded=by_status.get(DeliveryStatus.SUCCESS, 0),
        failed=by_status.get(DeliveryStatus.FAILED, 0),
        pending=sum(by_status.get(status, 0) for status in _OPEN),
        latency_p50_ms=p50,
        latency_p95_ms=p95,
        series=series,
    )


_TIMED: Final = Q(
    status=DeliveryStatus.SUCCESS, first_attempt_at__isnull=False, completed_at__isnull=False
)


def _latency_percentiles(rows: QuerySet[Delivery]) -> tuple[int | None, int | None]:
    timed = rows.filter(_TIMED)
    if connection.vendor == "postgresql":
        return _percentiles_in_postgres(timed)
    latencies = sorted(
        (completed - first).total_seconds() * 1000
        for first, completed in timed.values_list("first_attempt_at", "completed_at")
        if first is not None and completed is not None  # the filter says so; mypy cannot see it
    )
    return interpolated(latencies, 0.5), interpolated(latencies, 0.95)


def _percentiles_in_postgres(timed: QuerySet[Delivery]) -> tuple[int | None, int | None]:
    inner, params = timed.values("first_attempt_at", "completed_at").query.sql_with_params()
    # The inner query is the ORM's own, compiled with placeholders.
    sql = (
        "SELECT percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP "  # noqa: S608
        "(ORDER BY EXTRACT(EPOCH FROM (t.completed_at - t.first_attempt_at)) * 1000) "
        f"FROM ({inner}) AS t"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        values = cursor.fetchone()[0]
    if not values:
        return None, None
    return round(values[0]), round(values[1])


def interpolated(ordered: Sequence[float], fraction: float) -> int | None:
    """The ``fraction`` percentile of sorted values, interpolated between neighbours."""
    if not ordered:
        return None
    position = fraction * (len(ordered) - 1)
    lower = int(position)
    upper = min(lower + 1, len(ordered) - 1)
    value = ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)
    return round(value)
