"""A recorded batch's writes (``webhooks.delivery.batch_writes``): one statement on PostgreSQL,
a few per row elsewhere, and the same rows either way. The suite runs on both databases."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.webhooks.webhook_fixtures import add_attempt, make_delivery
from webhooks.delivery.batch_writes import RowChange, Written, write_batch
from webhooks.delivery.policy import DeliveryState
from webhooks.health.rollup import OutcomeChange
from webhooks.models import (
    AttemptTrigger,
    Delivery,
    DeliveryAttempt,
    DeliveryOutcomeCount,
    DeliveryStatus,
    Webhook,
)

pytestmark = pytest.mark.django_db

NOW = timezone.now()
SUCCEEDED = DeliveryState(
    status=DeliveryStatus.SUCCESS,
    next_attempt_at=None,
    automatic_attempts=1,
    last_error="",
    completed_at=NOW,
)


def leased(webhook: Webhook, **fields: Any) -> Delivery:
    return make_delivery(webhook, lease_expires_at=NOW + timedelta(seconds=35), **fields)


def change(delivery: Delivery, **fields: Any) -> RowChange:
    """A successful automatic attempt of ``delivery`` under its current lease."""
    values: dict[str, Any] = {
        "delivery_id": delivery.id,
        "lease": delivery.lease_expires_at,
        "attempt": {
            "trigger": AttemptTrigger.AUTOMATIC.value,
            "started_at": NOW,
            "duration_ms": 42,
            "status_code": 200,
            "response_body": "ok",
            "request_headers": {"webhook-id": delivery.id, "x-name": 'Überleben "q" {b}'},
            "response_headers": {"content-type": "text/plain"},
            "error": "",
        },
        "state": SUCCEEDED,
        "answered_request": None,
        "counted": [OutcomeChange(delivery.webhook_id, NOW, DeliveryStatus.SUCCESS, 42.0)],
    }
    return RowChange(**{**values, **fields})


def stored_state(delivery: Delivery) -> DeliveryState:
    return DeliveryState.of(Delivery.objects.get(id=delivery.id))


def test_it_stores_the_attempt_as_made(webhook: Webhook) -> None:
    delivery = leased(webhook)
    written = change(delivery)
    write_batch([written])
    stored = DeliveryAttempt.objects.get(delivery=delivery)
    assert {name: getattr(stored, name) for name in written.attempt} == written.attempt


def test_it_stores_text_as_given_whatever_characters_it_holds(webhook: Webhook) -> None:
    delivery = leased(webhook)
    awkward = "quote \" apostrophe ' backslash \\ {brace,comma} %(name)s NULL \u00e9 \U0001f3ae \n"
    attempt = {**change(delivery).attempt, "response_body": awkward}
    write_batch([change(delivery, attempt=attempt)])
    assert DeliveryAttempt.objects.get(delivery=delivery).response_body == awkward


def test_it_numbers_the_attempt_after_the_deliverys_earlier_ones(webhook: Webhook) -> None:
    delivery = leased(webhook)
    add_attempt(delivery, 1)
    add_attempt(delivery, 2)
    assert write_batch([change(delivery)])[0] == Written(3, True, None)


def test_it_moves_the_row_to_its_new_state_and_gives_the_lease_back(webhook: Webhook) -> None:
    delivery = leased(webhook)
    write_batch([change(delivery)])
    assert stored_state(delivery) == SUCCEEDED
    assert Delivery.objects.get(id=delivery.id).lease_expires_at is None


def test_it_counts_the_outcome_of_a_moved_row(webhook: Webhook) -> None:
    write_batch([change(leased(webhook)), change(leased(webhook))])
    counts = DeliveryOutcomeCount.objects.values_list("outcome", "count")
    assert list(counts) == [("success", 2)]


def test_it_records_a_late_attempt_but_moves_nothing_once_the_lease_ran_out(
    webhook: Webhook,
) -> None:
    delivery = leased(webhook)
    written = write_batch([change(delivery, lease=NOW - timedelta(seconds=1))])
    assert written == [Written(1, False, None)]
    assert stored_state(delivery).status == DeliveryStatus.PENDING
    assert Delivery.objects.get(id=delivery.id).lease_expires_at == delivery.lease_expires_at
    assert DeliveryAttempt.objects.filter(delivery=delivery).count() == 1
    assert not DeliveryOutcomeCount.objects.exists()


def test_it_clears_the_redelivery_request_the_attempt_answered(webhook: Webhook) -> None:
    requested = NOW - timedelta(seconds=5)
    delivery = leased(webhook, redelivery_requested_at=requested)
    written = write_batch([change(delivery, answered_request=requested)])
    assert written == [Written(1, True, None)]
    assert Delivery.objects.get(id=delivery.id).redelivery_requested_at is None


def test_it_keeps_a_redelivery_request_made_during_the_attempt(webhook: Webhook) -> None:
    requested, newer = NOW - timedelta(seconds=5), NOW - timedelta(seconds=1)
    delivery = leased(webhook, redelivery_requested_at=newer)
    written = write_batch([change(delivery, answered_request=requested)])
    assert written == [Written(1, True, newer)]


def test_it_keeps_a_redelivery_request_an_automatic_attempt_did_not_answer(
    webhook: Webhook,
) -> None:
    requested = NOW - timedelta(seconds=1)
    delivery = leased(webhook, redelivery_requested_at=requested)
    assert write_batch([change(delivery)]) == [Written(1, True, requested)]


def test_it_skips_a_deleted_delivery_and_writes_the_rest(webhook: Webhook) -> None:
    gone, kept = leased(webhook), leased(webhook)
    batch = [change(gone), change(kept)]
    Delivery.objects.filter(id=gone.id).delete()
    assert write_batch(batch) == [None, Written(1, True, None)]
    assert stored_state(kept) == SUCCEEDED


def test_it_leaves_rows_outside_the_batch_alone(webhook: Webhook) -> None:
    moved, untouched = leased(webhook), leased(webhook)
    write_batch([change(moved)])
    assert stored_state(untouched).status == DeliveryStatus.PENDING


def test_it_writes_each_rows_own_state(webhook: Webhook) -> None:
    retried, settled = leased(webhook), leased(webhook)
    retrying = replace(
        SUCCEEDED,
        status=DeliveryStatus.RETRY_SCHEDULED,
        next_attempt_at=NOW + timedelta(seconds=60),
        last_error="status_503",
        completed_at=None,
    )
    write_batch([change(retried, state=retrying, counted=[]), change(settled)])
    assert (stored_state(retried), stored_state(settled)) == (retrying, SUCCEEDED)
