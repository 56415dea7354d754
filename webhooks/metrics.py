"""The delivery engine's metrics: hooks it calls with plain values, and the backlog gauge.

``attempts_recorded`` runs after the recording transaction commits, once per batch; it only
bumps in-process counters (a few microseconds per attempt). The backlog (due but unsent) is
read from the database at scrape time, so it is right whichever process is alive.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gshost.monitoring.metrics import (
    WEBHOOK_ATTEMPTS,
    WEBHOOK_DELIVERIES,
    WEBHOOK_FIRST_ATTEMPT_LAG,
    WEBHOOK_RECORD_DELAY,
)
from webhooks.delivery import claims
from webhooks.models import Delivery, DeliveryStatus

SETTLED: Final = frozenset({DeliveryStatus.SUCCESS.value, DeliveryStatus.FAILED.value})


@dataclass(frozen=True)
class AttemptOutcome:
    """One recorded attempt, in plain values."""

    trigger: str
    status_code: int | None
    error: str | None
    # Set for a delivery's first automatic attempt: when it was due, and when it started.
    due_at: datetime | None = None
    started_at: datetime | None = None
    # The delivery's status after this attempt, when the attempt changed it to a final one.
    settled_as: str | None = None
    delivery_id: str = ""
    finished_at: datetime | None = None  # when the attempt ended (its answer, or the error)


def outcome_label(status_code: int | None, error: str | None) -> str:
    if error:
        return error
    if status_code is None:
        return "unknown"
    if 200 <= status_code < 300:
        return "success"
    return f"http_{status_code // 100}xx"


def attempts_recorded(outcomes: Iterable[AttemptOutcome]) -> None:
    """Counted per label set, one increment each: in multi-process mode every increment is a
    locked write to a shared file, and a recorded batch holds many attempts of few kinds. Called
    right after the batch's commit, which is when its record delay is measured."""
    recorded_at = datetime.now(UTC)
    attempts: Counter[tuple[str, str]] = Counter()
    settled: Counter[str] = Counter()
    oldest: datetime | None = None
    for outcome in outcomes:
        if outcome.finished_at is not None and (oldest is None or outcome.finished_at < oldest):
            oldest = outcome.finished_at
        attempts[(outcome.trigger, outcome_label(outcome.status_code, outcome.error))] += 1
        if outcome.due_at is not None and outcome.started_at is not None:
            lag = (outcome.started_at - outcome.due_at).total_seconds()
            WEBHOOK_FIRST_ATTEMPT_LAG.observe(max(lag, 0.0))
        if outcome.settled_as in SETTLED:
            settled[outcome.settled_as] += 1
    for (trigger, label), count in attempts.items():
        WEBHOOK_ATTEMPTS.labels(trigger, label).inc(count)
    for status, count in settled.items():
        WEBHOOK_DELIVERIES.labels(status).inc(count)
    if oldest is not None:
        WEBHOOK_RECORD_DELAY.observe(max((recorded_at - oldest).total_seconds(), 0.0))


class BacklogCollector(Collector):
    """Deliveries due now (or overdue) that no worker holds: the count and the oldest's age."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = timezone.now()
        due = Delivery.objects.filter(claims.due(now))
        summary = due.aggregate(count=Count("*"), oldest=Min("next_attempt_at"))
        count = GaugeMetricFamily(
            "gshost_webhook_backlog_deliveries",
            "Deliveries whose attempt is due and that no worker holds (read at scrape).",
        )
        count.add_metric([], summary["count"] or 0)
        oldest = GaugeMetricFamily(
            "gshost_webhook_backlog_oldest_seconds",
            "How long the oldest due, unsent delivery has been due (0 when none is).",
        )
        age = (now - summary["oldest"]).total_seconds() if summary["oldest"] else 0.0
        oldest.add_metric([], max(age, 0.0))
        yield count
        yield oldest


def backlog_collector() -> Collector:
    return BacklogCollector()
