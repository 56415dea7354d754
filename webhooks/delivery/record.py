"""Recording finished attempts: each attempt row, its delivery's next state (``policy``),
the endpoint stats' counts, and the lease released, in one transaction per sender batch.

The state moves only while the claim's lease still holds: a row whose lease ran out and was
retaken by another worker keeps the newer holder's state (the attempt is still recorded, as
it was made). Once committed, ``recording_hooks`` hears what happened: delivery metrics, and
failure notices for deliveries that have just failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Case, Count, DateTimeField, F, OuterRef, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from webhooks import recording_hooks, rollup
from webhooks.delivery import policy
from webhooks.delivery.claims import Claim
from webhooks.delivery.policy import DeliveryState
from webhooks.delivery.transport import AttemptResult
from webhooks.metrics import AttemptOutcome
from webhooks.models import AttemptTrigger, Delivery, DeliveryAttempt


@dataclass(frozen=True)
class Finished:
    claim: Claim
    result: AttemptResult


def record_attempts(finished: Sequence[Finished]) -> None:
    """Write the attempts (each delivery at most once) and their deliveries' new states, all
    or nothing; then tell the hooks. Deliveries deleted meanwhile are skipped.

    A fixed number of statements per batch, whatever its size: the rows are read and locked
    with their attempt counts, rows moving to the same state are updated together (a burst's
    successes are one update), then the attempts and the stats' counts are inserted."""
    if not finished:
        return
    now = timezone.now()
    outcomes: list[AttemptOutcome] = []
    attempts: list[DeliveryAttempt] = []
    counted: list[rollup.OutcomeChange] = []
    moves: dict[tuple[datetime, DeliveryState, datetime | None], list[str]] = {}
    with transaction.atomic():
        current = _locked_rows([done.claim.delivery_id for done in finished])
        for done in finished:
            claim = done.claim
            if claim.delivery_id not in current:
                continue  # deleted with its webhook, or purged
            lease, made = current[claim.delivery_id]
            after = _next_state(done, now)
            if lease == claim.lease_expires_at:
                moves.setdefault((lease, after, _answered(claim)), []).append(claim.delivery_id)
                counted += _rollup(claim, after)
            else:
                after = claim.state  # retaken by another worker: its holder moves it
            attempts.append(_attempt_row(done, made + 1))
            outcomes.append(_outcome(done, made + 1, after))
        for (lease, after, answered), ids in moves.items():
            _move(ids, lease, after, answered)
        DeliveryAttempt.objects.bulk_create(attempts)
        rollup.apply_changes(counted)
    recording_hooks.after_commit(outcomes)


def _locked_rows(ids: list[str]) -> dict[str, tuple[datetime | None, int]]:
    """Each row's lease and number of attempts so far, locked until the transaction ends."""
    made = (
        DeliveryAttempt.objects.filter(delivery=OuterRef("pk"))
        .order_by()
        .values("delivery")
        .annotate(count=Count("pk"))
        .values("count")
    )
    rows = (
        Delivery.objects.select_for_update()
        .filter(id__in=ids)
        .annotate(made=Coalesce(Subquery(made), 0))
        .values_list("id", "lease_expires_at", "made")
    )
    return {delivery_id: (lease, count) for delivery_id, lease, count in rows}


def _next_state(done: Finished, now: datetime) -> DeliveryState:
    return policy.after_attempt(
        done.claim.state,
        trigger=done.claim.trigger,
        status_code=done.result.status_code,
        error=done.result.error,
        now=now,
    )


def _answered(claim: Claim) -> datetime | None:
    """The redelivery request this attempt answers; one asked for meanwhile stays."""
    return claim.redelivery_requested_at if claim.trigger == AttemptTrigger.REDELIVERY else None


def _move(ids: list[str], lease: datetime, after: DeliveryState, answered: datetime | None) -> None:
    """Set the state and release the lease of rows this claim still holds."""
    Delivery.objects.filter(id__in=ids, lease_expires_at=lease).update(
        **asdict(after),
        lease_expires_at=None,
        redelivery_requested_at=Case(
            When(redelivery_requested_at=answered, then=Value(None)),
            default=F("redelivery_requested_at"),
            output_field=DateTimeField(),
        ),
    )


def _attempt_row(done: Finished, number: int) -> DeliveryAttempt:
    result = done.result
    return DeliveryAttempt(
        delivery_id=done.claim.delivery_id,
        number=number,
        trigger=done.claim.trigger.value,
        started_at=result.started_at,
        duration_ms=result.duration_ms,
        status_code=result.status_code,
        response_body=result.response_body,
        request_headers=result.request_headers,
        response_headers=result.response_headers,
        error=result.error or "",
    )


def _rollup(claim: Claim, after: DeliveryState) -> list[rollup.OutcomeChange]:
    return recording_hooks.rollup_changes(
        webhook_id=claim.webhook_id,
        created_at=claim.created_at,
        status_before=claim.state.status,
        status_after=after.status,
        first_attempt_at=claim.first_attempt_at,
        completed_at=after.completed_at,
    )


def _outcome(done: Finished, number: int, after: DeliveryState) -> AttemptOutcome:
    claim, result = done.claim, done.result
    return recording_hooks.outcome_of(
        delivery_id=claim.delivery_id,
        trigger=claim.trigger.value,
        attempt_number=number,
        status_code=result.status_code,
        error=result.error,
        started_at=result.started_at,
        finished_at=result.started_at + timedelta(milliseconds=result.duration_ms),
        due_at=claim.state.next_attempt_at,
        status_before=claim.state.status,
        status_after=after.status,
    )
