"""A recorded batch's writes (``webhooks.delivery.batch_writes``): one statement on PostgreSQL,
one per table elsewhere, and the same rows either way. The suite runs on both databases."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from tests.webhooks.webhook_fixtures import make_delivery
from webhooks.delivery.batch_writes import write_batch
from webhooks.models import (
    AttemptTrigger,
    Delivery,
    DeliveryAttempt,
    DeliveryOutcomeCount,
    DeliveryStatus,
    Webhook,
)
from webhooks.rollup import OutcomeChange

pytestmark = pytest.mark.django_db


def attempt_values(delivery: Delivery, number: int, **fields: Any) -> dict[str, Any]:
    return {
        "delivery_id": delivery.id,
        "number": number,
        "trigger": AttemptTrigger.AUTOMATIC.value,
        "started_at": timezone.now(),
        "duration_ms": 42,
        "status_code": 200,
        "response_body": "ok",
        "request_headers": {"webhook-id": delivery.id},
        "response_headers": {"content-type": "text/plain"},
        "error": "",
        **fields,
    }


def succeeded(delivery: Delivery, at: datetime) -> Delivery:
    delivery.status, delivery.next_attempt_at, delivery.completed_at = "success", None, at
    return delivery


def write(**batch: Any) -> None:
    with transaction.atomic():
        write_batch(**{"attempts": [], "states": [], "counted": [], **batch})


def test_it_inserts_each_attempt_with_its_headers_and_answer(webhook: Webhook) -> None:
    delivery = make_delivery(webhook)
    values = attempt_values(
        delivery,
        1,
        status_code=None,
        error="timeout",
        response_body="",
        request_headers={"webhook-id": delivery.id, "x-name": 'Überleben "quoted" {braces}'},
        response_headers={},
    )
    write(attempts=[values])
    stored = DeliveryAttempt.objects.get(delivery=delivery)
    written = {name: getattr(stored, name) for name in values if name != "delivery_id"}
    assert written == {name: value for name, value in values.items() if name != "delivery_id"}


def test_it_saves_each_rows_new_state(webhook: Webhook) -> None:
    now = timezone.now()
    retried, settled = make_delivery(webhook), make_delivery(webhook)
    retried.status, retried.next_attempt_at = "retry_scheduled", now + timedelta(seconds=60)
    retried.automatic_attempts, retried.last_error = 1, "status_503"
    write(states=[retried, succeeded(settled, now)])
    assert Delivery.objects.get(id=retried.id).next_attempt_at == retried.next_attempt_at
    assert Delivery.objects.get(id=retried.id).last_error == "status_503"
    assert Delivery.objects.get(id=settled.id).completed_at == now


def test_it_leaves_rows_outside_the_batch_alone(webhook: Webhook) -> None:
    settled, untouched = make_delivery(webhook), make_delivery(webhook)
    write(states=[succeeded(settled, timezone.now())])
    assert Delivery.objects.get(id=untouched.id).status == DeliveryStatus.PENDING


def test_it_adds_the_batchs_outcomes_to_the_counts(webhook: Webhook) -> None:
    now = timezone.now()
    write(counted=[OutcomeChange(webhook.id, now, DeliveryStatus.FAILED)])
    write(
        counted=[
            OutcomeChange(webhook.id, now, DeliveryStatus.FAILED),
            OutcomeChange(webhook.id, now, DeliveryStatus.SUCCESS, 40.0),
        ]
    )
    counts = dict(DeliveryOutcomeCount.objects.values_list("outcome", "count"))
    assert counts == {"failed": 2, "success": 1}


def test_it_writes_all_three_tables_in_one_batch(webhook: Webhook) -> None:
    delivery = make_delivery(webhook)
    now = timezone.now()
    write(
        attempts=[attempt_values(delivery, 1)],
        states=[succeeded(delivery, now)],
        counted=[OutcomeChange(webhook.id, delivery.created_at, DeliveryStatus.SUCCESS, 42.0)],
    )
    assert DeliveryAttempt.objects.filter(delivery=delivery).count() == 1
    assert Delivery.objects.get(id=delivery.id).status == DeliveryStatus.SUCCESS
    assert DeliveryOutcomeCount.objects.get(webhook=webhook).count == 1


def test_it_writes_nothing_when_the_changes_cancel_out(webhook: Webhook) -> None:
    now = timezone.now()
    write(
        counted=[
            OutcomeChange(webhook.id, now, DeliveryStatus.FAILED),
            OutcomeChange(webhook.id, now, DeliveryStatus.FAILED, delta=-1),
        ]
    )
    assert not DeliveryOutcomeCount.objects.exists()
