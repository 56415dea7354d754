"""What the engine tells the rest of the service when it records attempts: the timing columns
the endpoint stats read, the delivery metrics, and failure notices to the owners."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.core import mail
from django.utils import timezone
from freezegun import freeze_time

from accounts.services import member_add
from tests.metric_samples import sample
from tests.webhooks.delivery_fixtures import Hooks, deliver_due_now, reload
from tests.webhooks.receiver import HttpsReceiver
from webhooks.health.rollup import OutcomeChange, apply_changes
from webhooks.health.stats import webhook_stats
from webhooks.metrics import AttemptOutcome, attempts_recorded
from webhooks.models import DeliveryOutcomeCount, DeliveryStatus, Webhook
from webhooks.retention import purge_delivery_history


@pytest.fixture
def owner(hooks: Hooks, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    return member_add(
        organization=hooks.organization, email="olga@acme.test", password="olga-pw-123", owner=True
    )


def test_it_records_when_the_first_attempt_started_and_when_it_succeeded(hooks: Hooks) -> None:
    delivery = hooks.delivery(hooks.webhook())
    deliver_due_now()
    delivery = reload(delivery)
    assert delivery.status == DeliveryStatus.SUCCESS
    assert delivery.first_attempt_at <= delivery.completed_at


def test_it_keeps_the_first_attempts_time_across_retries(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    receiver.set_behaviour(status=503)
    delivery = hooks.delivery(hooks.webhook())
    deliver_due_now()
    first = reload(delivery).first_attempt_at
    receiver.set_behaviour(status=200)
    type(delivery).objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
    deliver_due_now()
    delivery = reload(delivery)
    assert (delivery.status, delivery.first_attempt_at) == (DeliveryStatus.SUCCESS, first)


def test_it_gives_the_stats_a_latency(hooks: Hooks) -> None:
    webhook = hooks.webhook()
    hooks.delivery(webhook)
    deliver_due_now()
    assert webhook_stats(webhook.id, "1h").latency_p50_ms is not None


def test_it_counts_a_settled_delivery_for_the_stats(hooks: Hooks) -> None:
    webhook = hooks.webhook()
    hooks.delivery(webhook)
    deliver_due_now()
    stats = webhook_stats(webhook.id, "1h")
    assert (stats.succeeded, stats.failed, stats.pending) == (1, 0, 0)


def test_it_moves_a_failure_redelivered_with_success_to_the_successes(
    hooks: Hooks, receiver: HttpsReceiver
) -> None:
    webhook = hooks.webhook()
    delivery = hooks.delivery(webhook)
    url = webhook.url
    Webhook.objects.filter(pk=webhook.pk).update(url=f"https://10.0.0.5:{receiver.port}/hook")
    deliver_due_now()
    assert webhook_stats(webhook.id, "1h").failed == 1
    Webhook.objects.filter(pk=webhook.pk).update(url=url)
    type(delivery).objects.filter(pk=delivery.pk).update(redelivery_requested_at=timezone.now())
    deliver_due_now()
    stats = webhook_stats(webhook.id, "1h")
    assert (stats.succeeded, stats.failed) == (1, 0)


def test_it_counts_attempts_by_outcome(hooks: Hooks, receiver: HttpsReceiver) -> None:
    receiver.set_behaviour(status=503)
    before = sample("gshost_webhook_attempts_total", trigger="automatic", outcome="http_5xx")
    hooks.delivery(hooks.webhook())
    deliver_due_now()
    after = sample("gshost_webhook_attempts_total", trigger="automatic", outcome="http_5xx")
    assert after - before == 1


def test_it_counts_settled_deliveries(hooks: Hooks) -> None:
    before = sample("gshost_webhook_deliveries_settled_total", status="success")
    hooks.delivery(hooks.webhook())
    deliver_due_now()
    assert sample("gshost_webhook_deliveries_settled_total", status="success") - before == 1


def test_it_observes_the_first_attempt_lag(hooks: Hooks) -> None:
    before = sample("gshost_webhook_first_attempt_lag_seconds_count")
    hooks.delivery(hooks.webhook(), next_attempt_at=timezone.now() - timedelta(seconds=3))
    deliver_due_now()
    assert sample("gshost_webhook_first_attempt_lag_seconds_count") - before == 1
    assert sample("gshost_webhook_first_attempt_lag_seconds_bucket", le="2.0") < sample(
        "gshost_webhook_first_attempt_lag_seconds_bucket", le="5.0"
    )


def test_it_observes_a_record_delay_for_each_recorded_batch(hooks: Hooks) -> None:
    before = sample("gshost_webhook_record_delay_seconds_count")
    hooks.delivery(hooks.webhook())
    deliver_due_now()
    assert sample("gshost_webhook_record_delay_seconds_count") - before == 1


@pytest.mark.django_db  # a scrape reads the backlog
def test_the_record_delay_runs_from_the_end_of_the_batchs_oldest_attempt() -> None:
    def ended(at: str) -> AttemptOutcome:
        return AttemptOutcome(
            trigger="automatic", status_code=200, error=None, finished_at=datetime.fromisoformat(at)
        )

    under_quarter = sample("gshost_webhook_record_delay_seconds_bucket", le="0.25")
    under_half = sample("gshost_webhook_record_delay_seconds_bucket", le="0.5")
    with freeze_time("2026-11-23T12:00:00.300+00:00"):
        attempts_recorded(
            [ended("2026-11-23T12:00:00.290+00:00"), ended("2026-11-23T12:00:00+00:00")]
        )
    assert sample("gshost_webhook_record_delay_seconds_bucket", le="0.25") == under_quarter
    assert sample("gshost_webhook_record_delay_seconds_bucket", le="0.5") == under_half + 1


def test_it_emails_the_owners_when_a_delivery_fails(
    hooks: Hooks, receiver: HttpsReceiver, owner
) -> None:
    webhook = hooks.webhook()
    delivery = hooks.delivery(webhook)
    Webhook.objects.filter(pk=webhook.pk).update(url=f"https://10.0.0.5:{receiver.port}/hook")
    deliver_due_now()
    (message,) = mail.outbox
    assert message.to == ["olga@acme.test"]
    assert delivery.id in message.body
    assert "Last error: address_rejected" in message.body


def test_it_sends_no_notice_for_a_retry(hooks: Hooks, receiver: HttpsReceiver, owner) -> None:
    receiver.set_behaviour(status=503)
    hooks.delivery(hooks.webhook())
    deliver_due_now()
    assert mail.outbox == []


def test_it_purges_outcome_counts_with_the_history(hooks: Hooks) -> None:
    webhook = hooks.webhook()
    with freeze_time("2026-11-01 12:30:00"):
        apply_changes([OutcomeChange(webhook.id, timezone.now(), DeliveryStatus.SUCCESS, 40)])
    with freeze_time("2026-11-02 12:30:00"):
        apply_changes([OutcomeChange(webhook.id, timezone.now(), DeliveryStatus.FAILED)])
    with freeze_time("2026-11-09 12:10:00"):
        purge_delivery_history()
    assert list(DeliveryOutcomeCount.objects.values_list("outcome", flat=True)) == ["failed"]
