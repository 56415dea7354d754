"""The two spellings of claim and record (one statement on PostgreSQL, ORM statements on SQLite)
do the same thing: on PostgreSQL, where both run, each is applied to the same rows in a
savepoint that is then rolled back, and what they leave behind is compared."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone
from freezegun import freeze_time

from tests.webhooks.delivery_fixtures import Hooks
from webhooks.delivery import claims, record
from webhooks.delivery.claims import Claim
from webhooks.delivery.policy import STATE_FIELDS
from webhooks.delivery.record import ATTEMPT_COLUMNS, Finished
from webhooks.models import Delivery, DeliveryAttempt, DeliveryOutcomeCount, DeliveryStatus
from webhooks.targets.transport import AttemptResult

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the one-statement spelling needs PostgreSQL"
)

CLAIMS = {"orm": claims._claim_compare_and_set, "one statement": claims._claim_in_one_statement}
WRITES = {"orm": record._write_in_transaction, "one statement": record.write_in_one_statement}


class _RolledBack(Exception):
    pass


def in_savepoint(action: Callable[[], Any], leaves: Callable[[], Any]) -> tuple[Any, Any]:
    """``action()``'s result and ``leaves()`` read after it, with every write rolled back."""
    outcome: list[Any] = []
    try:
        with transaction.atomic():
            outcome += [action(), leaves()]
            raise _RolledBack
    except _RolledBack:
        pass
    return outcome[0], outcome[1]


def without_lease(claim: Claim) -> Claim:
    """The ORM spelling's lease carries a stamp of its own (sub-millisecond jitter)."""
    return dataclasses.replace(claim, lease_expires_at=timezone.now())


def delivery_rows() -> list[tuple[Any, ...]]:
    columns = (
        "id",
        *STATE_FIELDS,
        "first_attempt_at",
        "redelivery_requested_at",
        "lease_expires_at",
    )
    return list(Delivery.objects.order_by("id").values_list(*columns))


def attempt_rows() -> list[tuple[Any, ...]]:
    columns = ("delivery_id", "number", *ATTEMPT_COLUMNS)
    return list(DeliveryAttempt.objects.order_by("delivery_id", "number").values_list(*columns))


def count_rows() -> list[tuple[Any, ...]]:
    columns = ("webhook_id", "hour", "outcome", "latency_bucket", "count")
    return list(DeliveryOutcomeCount.objects.order_by(*columns[:4]).values_list(*columns))


def answer(status_code: int | None, error: str | None = None) -> AttemptResult:
    return AttemptResult(
        started_at=datetime.now(UTC),
        duration_ms=40,
        status_code=status_code,
        response_body="ok" if status_code else "",
        request_headers={"Content-Type": "application/json"},
        response_headers={"Content-Length": "2"} if status_code else {},
        error=error,
    )


@pytest.mark.parametrize("by_id", [True, False], ids=["named rows", "the due scan"])
@freeze_time("2026-11-22 10:00:00")
def test_both_claim_spellings_take_the_same_rows_and_read_the_same_claims(
    hooks: Hooks, by_id: bool
) -> None:
    now = timezone.now()
    webhook, skipped = hooks.webhook(), hooks.webhook("/skipped")
    rows = [
        hooks.delivery(webhook),
        hooks.delivery(webhook, status=DeliveryStatus.RETRY_SCHEDULED, automatic_attempts=2),
        hooks.delivery(webhook, lease_expires_at=now - timedelta(seconds=1)),
        hooks.delivery(webhook, status=DeliveryStatus.FAILED, redelivery_requested_at=now),
        hooks.delivery(webhook, next_attempt_at=now + timedelta(seconds=30)),
        hooks.delivery(webhook, status=DeliveryStatus.SUCCESS),
        hooks.delivery(webhook, lease_expires_at=now + timedelta(seconds=30)),
        hooks.delivery(skipped),
    ]
    ids = [row.id for row in rows] if by_id else None

    taken = {
        name: in_savepoint(lambda claim=claim: claim(20, [skipped.id], ids), delivery_rows)
        for name, claim in CLAIMS.items()
    }

    orm, one = taken["orm"], taken["one statement"]
    assert len(orm[0]) == 4
    by_delivery = {claim.delivery_id: without_lease(claim) for claim in orm[0]}
    assert {claim.delivery_id: without_lease(claim) for claim in one[0]} == by_delivery
    assert [row[:-1] for row in orm[1]] == [row[:-1] for row in one[1]]  # all but the lease


@freeze_time("2026-11-22 10:00:00")
def test_both_record_spellings_write_the_same_rows(hooks: Hooks) -> None:
    now = timezone.now()
    webhook = hooks.webhook()
    hooks.delivery(webhook)
    hooks.delivery(webhook)
    hooks.delivery(webhook, status=DeliveryStatus.RETRY_SCHEDULED, automatic_attempts=5)
    hooks.delivery(webhook, status=DeliveryStatus.FAILED, redelivery_requested_at=now)
    lost = hooks.delivery(webhook)
    taken = sorted(claims.claim_due(10), key=lambda claim: claim.delivery_id)
    Delivery.objects.filter(id=lost.id).update(lease_expires_at=now + timedelta(minutes=1))
    results = iter([answer(200), answer(503), answer(None, "timeout"), answer(204), answer(200)])
    changes = [
        (done, record._next_state(done, now))
        for done in [Finished(claim, next(results)) for claim in taken]
    ]

    def leaves() -> tuple[Any, ...]:
        return delivery_rows(), attempt_rows(), count_rows()

    written = {
        name: in_savepoint(lambda write=write: write(changes), leaves)
        for name, write in WRITES.items()
    }

    assert written["orm"] == written["one statement"]
    assert sum(applied for _, applied in written["orm"][0].values()) == 4  # not the lost lease
