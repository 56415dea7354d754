"""Recording finished attempts: each attempt row, its delivery's next state (``policy``),
the endpoint stats' counts, and the lease released, in one transaction per sender batch.

The state moves by compare-and-set on the claim's lease: a row whose lease ran out and was
retaken by another worker keeps the newer holder's state (the attempt is still recorded, as
it was made). Once committed, ``recording_hooks`` hears what happened: delivery metrics, and
failure notices for deliveries that have just failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Case, Count, DateTimeField, F, Value, When
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
    or nothing; then tell the hooks. Deliveries deleted meanwhile are skipped."""
    if not finished:
        return
    now = timezone.now()
    outcomes: list[AttemptOutcome] = []
    with transaction.atomic():
        made = dict(
            Delivery.objects.filter(id__in=[done.claim.delivery_id for done in finished])
            .annotate(made=Count("attempts"))
            .values_list("id", "made")
        )
        attempts, counted = [], []
        for done in finished:
            claim = done.claim
            if claim.delivery_id not in made:
                continue  # deleted with its webhook, or purged
            after = _next_state(done, now)
            if _move(claim, after):
                counted += _rollup(claim, after)
            else:
                after = claim.state  # retaken by another worker: its holder moves it
            number = made[claim.delivery_id] + 1
            attempts.append(_attempt_row(done, number))
            outcomes.append(_outcome(done, number, after))
        DeliveryAttempt.objects.bulk_create(attempts)
        rollup.apply_changes(counted)
    recording_hooks.after_commit(outcomes)


def _next_state(done: Finished, now: datetime) -> DeliveryState:
    return policy.after_attempt(
        done.claim.state,
        trigger=done.claim.trigger,
        status_code=done.result.status_code,
        error=done.result.error,
        now=now,
    )


def _move(claim: Claim, after: DeliveryState) -> bool:
    """Set the state and release the lease if this claim still holds it. A redelivery answers
    its own request only; one asked for meanwhile stays."""
    answered = claim.redelivery_requested_at if claim.trigger == AttemptTrigger.REDELIVERY else None
    moved = Delivery.objects.filter(
        id=claim.delivery_id, lease_expires_at=claim.lease_expires_at
    ).update(
        **asdict(after),
        lease_expires_at=None,
        redelivery_requested_at=Case(
            When(redelivery_requested_at=answered, then=Value(None)),
            default=F("redelivery_requested_at"),
            output_field=DateTimeField(),
        ),
    )
    return moved == 1


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
