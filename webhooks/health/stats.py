"""An endpoint's health over a recent window.

Settled deliveries (succeeded, failed) and their latencies are read from the hourly outcome
counts the engine keeps (``webhooks.health.rollup``), a few hundred rows even for a busy week; the
deliveries still open are counted from the rows, through a partial index that holds only them.
The window is counted in whole buckets: from the start of the hour (or, beyond 48 hours, the
day) ``window`` ago, up to now. Latency runs from the claim of a delivery's first attempt to
the recording of its first success, so retries count in it; its percentiles are interpolated
inside logarithmic buckets (within 5 %).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from django.db.models import QuerySet, Sum
from django.utils import timezone

from webhooks.delivery.policy import OPEN_STATUSES
from webhooks.errors import InvalidWindow
from webhooks.health.rollup import interpolated_percentile, latency_bucket
from webhooks.models import Delivery, DeliveryAttempt, DeliveryOutcomeCount, DeliveryStatus

MIN_WINDOW: Final = timedelta(hours=1)
MAX_WINDOW: Final = timedelta(days=7)
DEFAULT_WINDOW: Final = "24h"
# Beyond this, one bucket per day instead of one per hour.
HOURLY_UP_TO: Final = timedelta(hours=48)
_WINDOW: Final = re.compile(r"([1-9][0-9]{0,3})([hd])")
# What parse_window accepts, as the API schema states it: 1h to 168h, or 1d to 7d.
WINDOW_PATTERN: Final = r"^(?:(?:[1-9]|[1-9][0-9]|1[0-5][0-9]|16[0-8])h|[1-7]d)$"


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
    size = bucket_size(window)
    moments = _empty_series(now - window, now, size)
    start = moments[0]
    counts = DeliveryOutcomeCount.objects.filter(webhook_id=webhook_id, hour__gte=start)
    by_bucket: dict[tuple[datetime, str], int] = {}
    for hour, outcome, total in (
        counts.values_list("hour", "outcome").annotate(total=Sum("count")).order_by()
    ):
        key = (_floor(hour, size), outcome)
        by_bucket[key] = by_bucket.get(key, 0) + (total or 0)
    series = [
        Bucket(
            at=moment,
            succeeded=by_bucket.get((moment, DeliveryStatus.SUCCESS), 0),
            failed=by_bucket.get((moment, DeliveryStatus.FAILED), 0),
        )
        for moment in moments
    ]
    histogram = list(
        counts.filter(outcome=DeliveryStatus.SUCCESS)
        .values_list("latency_bucket")
        .annotate(total=Sum("count"))
        .order_by("latency_bucket")
    )
    pending = Delivery.objects.filter(
        webhook_id=webhook_id, status__in=OPEN_STATUSES, created_at__gte=start
    ).count()
    return _stats(window_text, series, pending, histogram)


def webhook_stats_for_servers(
    webhook_id: str,
    window_text: str,
    server_ids: Collection[str],
    *,
    now: datetime | None = None,
) -> WebhookStats:
    """The same health counted over the deliveries of ``server_ids`` only (for a caller
    restricted to servers). The hourly counts do not know servers, so this reads the delivery
    rows of the window, and their attempts for the latency (first attempt's start to the end
    of the last one, bucketed like the engine's counts)."""
    window = parse_window(window_text)
    now = now or timezone.now()
    size = bucket_size(window)
    moments = _empty_series(now - window, now, size)
    rows = Delivery.objects.filter(
        webhook_id=webhook_id, server_id__in=sorted(server_ids), created_at__gte=moments[0]
    )
    settled: Counter[tuple[datetime, str]] = Counter()
    pending = 0
    for created_at, status in rows.values_list("created_at", "status"):
        if status in OPEN_STATUSES:
            pending += 1
        else:
            settled[(_floor(created_at, size), status)] += 1
    series = [
        Bucket(
            at=moment,
            succeeded=settled[(moment, DeliveryStatus.SUCCESS)],
            failed=settled[(moment, DeliveryStatus.FAILED)],
        )
        for moment in moments
    ]
    return _stats(window_text, series, pending, _latency_histogram(rows))


def _latency_histogram(rows: QuerySet[Delivery]) -> list[tuple[int, int]]:
    spans: dict[str, tuple[datetime, datetime]] = {}
    attempts = DeliveryAttempt.objects.filter(
        delivery__in=rows,
        delivery__status=DeliveryStatus.SUCCESS,
    )
    for delivery_id, started_at, duration_ms in attempts.values_list(
        "delivery_id", "started_at", "duration_ms"
    ):
        ended_at = started_at + timedelta(milliseconds=duration_ms)
        first, last = spans.get(delivery_id, (started_at, ended_at))
        spans[delivery_id] = (min(first, started_at), max(last, ended_at))
    buckets = Counter(
        latency_bucket(int((last - first).total_seconds() * 1000)) for first, last in spans.values()
    )
    return sorted(buckets.items())


def _stats(
    window_text: str, series: list[Bucket], pending: int, histogram: list[tuple[int, int]]
) -> WebhookStats:
    succeeded = sum(bucket.succeeded for bucket in series)
    failed = sum(bucket.failed for bucket in series)
    return WebhookStats(
        window=window_text,
        deliveries=succeeded + failed + pending,
        succeeded=succeeded,
        failed=failed,
        pending=pending,
        latency_p50_ms=interpolated_percentile(histogram, 0.5),
        latency_p95_ms=interpolated_percentile(histogram, 0.95),
        series=series,
    )
