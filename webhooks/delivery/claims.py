"""Taking delivery rows for an attempt (a lease) and giving them back with the outcome.

A row is due when an automatic attempt is due (pending or retry_scheduled, next_attempt_at
reached) or a redelivery was asked for, and nobody holds it: no lease, or a lease that ran out
because its worker died. Claiming sets the lease; nothing else changes until the attempt is
recorded, so a claim that is never finished simply becomes due again when its lease expires.
The claim also stamps ``first_attempt_at`` (kept across retries) for the endpoint stats, and
returns the row's ``DeliveryState``: only the lease holder changes it, so the recorder moves on
from that copy without reading the row again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import F, Min, Q, QuerySet, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from webhooks.delivery.policy import OPEN_STATUSES, STATE_FIELDS, DeliveryState
from webhooks.delivery.transport import AttemptResult
from webhooks.models import AttemptTrigger, Delivery, Webhook

_CLAIM_FIELDS: Final = (
    "id",
    "webhook_id",
    "event",
    "body",
    "lease_expires_at",
    "redelivery_requested_at",
    "webhook__url",
    "webhook__encrypted_secret",
    "webhook__encrypted_previous_secret",
    "webhook__previous_secret_expires_at",
    "created_at",
    "first_attempt_at",
    *STATE_FIELDS,
)


@dataclass(frozen=True)
class Claim:
    """A leased row and everything its attempt needs (read once, while claiming)."""

    delivery_id: str
    webhook_id: str
    url: str
    encrypted_secret: str = field(repr=False)  # never in a log line, even encrypted
    event: str
    body: str
    lease_expires_at: datetime
    redelivery_requested_at: datetime | None
    state: DeliveryState  # as claimed; what the attempt's outcome moves on from
    created_at: datetime
    first_attempt_at: datetime
    # A rolled secret's predecessor, signing beside it until its grace period ends.
    encrypted_previous_secret: str = field(default="", repr=False)
    previous_secret_expires_at: datetime | None = None

    @property
    def trigger(self) -> AttemptTrigger:
        """A row with a redelivery request is claimed for that request's one attempt."""
        if self.redelivery_requested_at is not None:
            return AttemptTrigger.REDELIVERY
        return AttemptTrigger.AUTOMATIC


class ClaimInterrupted(Exception):
    """The database failed part-way through a claim; ``taken`` are leased to the caller."""

    def __init__(self, taken: list[Claim]) -> None:
        super().__init__(f"claim interrupted after {len(taken)} rows")
        self.taken = taken


@dataclass(frozen=True)
class Finished:
    claim: Claim
    result: AttemptResult


def due_filter(now: datetime) -> Q:
    wanted = Q(status__in=OPEN_STATUSES, next_attempt_at__lte=now) | Q(
        redelivery_requested_at__isnull=False
    )
    free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    return wanted & free


def lease_duration() -> timedelta:
    return timedelta(
        seconds=float(settings.WEBHOOK_TIMEOUT_SECONDS)
        + float(settings.WEBHOOK_LEASE_MARGIN_SECONDS)
    )


def due_candidates(
    *,
    ids: Collection[str] | None = None,
    exclude_webhooks: Collection[str] = (),
    limit: int | None = None,
) -> list[tuple[str, str]]:
    """(delivery id, webhook id) of due rows, oldest due first; reads only, locks nothing."""
    rows = Delivery.objects.filter(due_filter(timezone.now()))
    if ids is not None:
        rows = rows.filter(id__in=list(ids))
    if exclude_webhooks:
        rows = rows.exclude(webhook_id__in=list(exclude_webhooks))
    ordered = rows.order_by("next_attempt_at", "created_at").values_list("id", "webhook_id")
    return list(ordered[:limit] if limit is not None else ordered)


def claim_deliveries(ids: Collection[str]) -> list[Claim]:
    """Lease those of ``ids`` that are still due and free; returns what this caller now holds."""
    if not ids:
        return []
    now = timezone.now()
    lease = now + lease_duration()
    if connection.features.has_select_for_update_skip_locked:
        return _claim_skip_locked(list(ids), now, lease)
    return _claim_compare_and_set(list(ids), now, lease)


def _claimable(ids: list[str], now: datetime) -> QuerySet[Delivery]:
    return (
        Delivery.objects.filter(due_filter(now), id__in=ids)
        .select_related("webhook")
        .only(*_CLAIM_FIELDS)
    )


# Only table names from the models are interpolated. The due condition is ``due_filter``
# written out: building it with the ORM cost more than the rest of a claim, and the claim
# tests hold both spellings to the same cases.
_CLAIM_SKIP_LOCKED_SQL: Final = (
    f'UPDATE "{Delivery._meta.db_table}" AS claimed SET lease_expires_at = %(lease)s, '  # noqa: S608
    "first_attempt_at = COALESCE(claimed.first_attempt_at, %(now)s) "
    f'FROM "{Webhook._meta.db_table}" AS hook '
    "WHERE hook.id = claimed.webhook_id AND claimed.id IN ("
    f'SELECT id FROM "{Delivery._meta.db_table}" WHERE id = ANY(%(ids)s) '
    "AND ((status = ANY(%(open)s) AND next_attempt_at <= %(now)s) "
    "OR redelivery_requested_at IS NOT NULL) "
    "AND (lease_expires_at IS NULL OR lease_expires_at < %(now)s) "
    "FOR UPDATE SKIP LOCKED) "
    "RETURNING claimed.id, claimed.webhook_id, hook.url, hook.encrypted_secret, "
    "claimed.event, claimed.body, claimed.redelivery_requested_at, "
    "hook.encrypted_previous_secret, hook.previous_secret_expires_at, "
    "claimed.created_at, claimed.first_attempt_at, "
    + ", ".join(f"claimed.{name}" for name in STATE_FIELDS)  # read back as DeliveryState(*…)
)


def _claim_skip_locked(ids: list[str], now: datetime, lease: datetime) -> list[Claim]:
    """PostgreSQL: rows another claimer is taking right now are skipped, not waited for.

    One statement (``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED) RETURNING``), so a
    claim costs one round trip.
    """
    params: dict[str, Any] = {
        "lease": lease,
        "ids": ids,
        "open": [status.value for status in OPEN_STATUSES],
        "now": now,
    }
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SKIP_LOCKED_SQL, params)
        rows = cursor.fetchall()
    return [
        Claim(
            delivery_id=delivery_id,
            webhook_id=webhook_id,
            url=url,
            encrypted_secret=encrypted_secret,
            event=event,
            body=body,
            lease_expires_at=lease,
            redelivery_requested_at=redelivery,
            encrypted_previous_secret=previous_secret,
            previous_secret_expires_at=previous_expires,
            created_at=created_at,
            first_attempt_at=first_attempt_at,
            state=DeliveryState(*state),
        )
        for (
            delivery_id,
            webhook_id,
            url,
            encrypted_secret,
            event,
            body,
            redelivery,
            previous_secret,
            previous_expires,
            created_at,
            first_attempt_at,
            *state,
        ) in rows
    ]


def _claim_compare_and_set(ids: list[str], now: datetime, lease: datetime) -> list[Claim]:
    """Elsewhere (SQLite): take a row only if nobody changed its lease or request meanwhile."""
    taken: list[Claim] = []
    for row in _claimable(ids, now):
        try:
            changed = Delivery.objects.filter(
                due_filter(now),
                id=row.id,
                lease_expires_at=row.lease_expires_at,
                redelivery_requested_at=row.redelivery_requested_at,
            ).update(
                lease_expires_at=lease,
                first_attempt_at=Coalesce(F("first_attempt_at"), Value(now)),
            )
        except DatabaseError as error:
            raise ClaimInterrupted(taken) from error
        if changed == 1:
            taken.append(_claim_of(row, lease, now))
    return taken


def _claim_of(row: Delivery, lease: datetime, now: datetime) -> Claim:
    return Claim(
        delivery_id=row.id,
        webhook_id=row.webhook_id,
        url=row.webhook.url,
        encrypted_secret=row.webhook.encrypted_secret,
        event=row.event,
        body=row.body,
        lease_expires_at=lease,
        redelivery_requested_at=row.redelivery_requested_at,
        encrypted_previous_secret=row.webhook.encrypted_previous_secret,
        previous_secret_expires_at=row.webhook.previous_secret_expires_at,
        created_at=row.created_at,
        first_attempt_at=row.first_attempt_at or now,
        state=DeliveryState.of(row),
    )


# --- the timer's questions, and giving leases back -----------------------------------------


def next_due_at(now: datetime) -> datetime | None:
    """The earliest moment a row becomes due that is not due yet: a scheduled attempt of a
    free row, or a lease running out. None when nothing is waiting."""
    # Open rows only (the status index): a redelivery's lease on a settled row is left to the
    # timer's next poll, at most a second later.
    found = Delivery.objects.filter(status__in=OPEN_STATUSES).aggregate(
        scheduled=Min(
            "next_attempt_at", filter=Q(next_attempt_at__gt=now, lease_expires_at__isnull=True)
        ),
        expiring=Min("lease_expires_at", filter=Q(lease_expires_at__gte=now)),
    )
    moments = [moment for moment in found.values() if moment is not None]
    return min(moments) if moments else None


def give_back(claims: Iterable[Claim]) -> int:
    """Release leases whose attempt will not be recorded (a stopping worker's unfinished
    ones): the rows are due again at once, for whichever worker claims them first."""
    released = 0
    for claim in claims:
        released += Delivery.objects.filter(
            id=claim.delivery_id, lease_expires_at=claim.lease_expires_at
        ).update(lease_expires_at=None)
    return released
