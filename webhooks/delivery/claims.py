"""What is due, and taking due rows for an attempt (a lease).

A row is **due** (``due``, the one definition) when an automatic attempt is due or a
redelivery was asked for, and nobody holds it: no lease, or one that ran out because its worker
died (a lease is one attempt's deadline plus a small margin). Claiming stamps the lease and
``first_attempt_at`` (kept across retries, for the endpoint stats); nothing else changes until
the attempt is recorded. A claim is one statement on PostgreSQL, three on SQLite; both read
the columns named once here (``_COLUMNS``). Why two spellings: bench/delivery_spellings.py.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from django.conf import settings
from django.db import connection
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from webhooks.delivery.policy import OPEN_STATUSES, STATE_FIELDS, DeliveryState
from webhooks.models import AttemptTrigger, Delivery, Webhook

# What a claim reads, in the order of ``Claim``'s fields (the state's last).
_COLUMNS: Final = (
    "id",
    "webhook_id",
    "webhook__url",
    "webhook__encrypted_secret",
    "webhook__encrypted_previous_secret",
    "webhook__previous_secret_expires_at",
    "event",
    "body",
    "lease_expires_at",
    "redelivery_requested_at",
    "created_at",
    "first_attempt_at",
    *STATE_FIELDS,
)


def due(now: datetime) -> Q:
    """The rows an attempt is due for at ``now`` that nobody holds."""
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


@dataclass(frozen=True)
class Claim:
    """A leased row and everything its attempt needs (read once, while claiming)."""

    delivery_id: str
    webhook_id: str
    url: str
    encrypted_secret: str = field(repr=False)  # never in a log line, even encrypted
    encrypted_previous_secret: str = field(repr=False)
    previous_secret_expires_at: datetime | None
    event: str
    body: str
    lease_expires_at: datetime
    redelivery_requested_at: datetime | None
    created_at: datetime
    first_attempt_at: datetime
    state: DeliveryState  # as claimed; only the lease holder moves it

    @property
    def trigger(self) -> AttemptTrigger:
        """A row with a redelivery request is claimed for that request's one attempt."""
        if self.redelivery_requested_at is not None:
            return AttemptTrigger.REDELIVERY
        return AttemptTrigger.AUTOMATIC


def claim_due(
    limit: int, *, skip_webhooks: Collection[str] = (), ids: Collection[str] | None = None
) -> list[Claim]:
    """Lease up to ``limit`` due rows (among ``ids`` if given), leaving out ``skip_webhooks``;
    returns what this caller now holds."""
    if ids is not None and not ids:
        return []
    if connection.vendor == "postgresql":
        return _claim_in_one_statement(limit, skip_webhooks, ids)
    return _claim_compare_and_set(limit, skip_webhooks, ids)


def _claim_compare_and_set(
    limit: int, skip_webhooks: Collection[str], ids: Collection[str] | None
) -> list[Claim]:
    """Three statements, no transaction: pick, lease by compare-and-set (the update re-checks
    ``due``; SQLite writes one at a time), read back what carries this claim's stamp. No
    ORDER BY: sorting a backlog's due rows on each claim cost more than the claim."""
    now = timezone.now()
    # A stamp of its own (sub-millisecond jitter): the rows that carry it are this claim's.
    lease = now + lease_duration() + timedelta(microseconds=random.randrange(1, 1000))
    candidates = Delivery.objects.filter(due(now)).exclude(webhook_id__in=list(skip_webhooks))
    if ids is not None:
        candidates = candidates.filter(id__in=list(ids))
    picked = list(candidates.values_list("id", flat=True)[:limit])
    if not picked:
        return []
    Delivery.objects.filter(due(now), id__in=picked).update(
        lease_expires_at=lease, first_attempt_at=Coalesce(F("first_attempt_at"), Value(now))
    )
    rows = Delivery.objects.filter(id__in=picked, lease_expires_at=lease)
    return _claims_of(rows.values_list(*_COLUMNS))


# ``due`` written out, one arm per partial index (open rows in due order, asked-for
# redeliveries), with the webhook's columns joined in: one round trip instead of three. Only
# table names and status constants are interpolated; tests hold both spellings to the same
# cases.
_DELIVERIES: Final = connection.ops.quote_name(Delivery._meta.db_table)
_FREE: Final = (
    "(lease_expires_at IS NULL OR lease_expires_at < %(now)s) AND NOT webhook_id = ANY(%(skip)s)"
)
_OPEN: Final = ", ".join(f"'{status.value}'" for status in OPEN_STATUSES)
_CLAIM_SQL: Final = (
    f"WITH due_now AS (SELECT id FROM {_DELIVERIES} WHERE {{among}} "  # noqa: S608
    f"status IN ({_OPEN}) AND next_attempt_at <= %(now)s AND {_FREE} "
    "ORDER BY next_attempt_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
    f"asked AS (SELECT id FROM {_DELIVERIES} WHERE {{among}} "
    f"redelivery_requested_at IS NOT NULL AND {_FREE} LIMIT %(limit)s FOR UPDATE SKIP LOCKED) "
    f"UPDATE {_DELIVERIES} AS claimed SET lease_expires_at = %(lease)s, "
    "first_attempt_at = COALESCE(claimed.first_attempt_at, %(now)s) "
    f"FROM {connection.ops.quote_name(Webhook._meta.db_table)} AS hook "
    "WHERE hook.id = claimed.webhook_id AND claimed.id IN ("
    "SELECT id FROM asked UNION SELECT id FROM due_now LIMIT %(limit)s) "
    "RETURNING "
    + ", ".join(
        name.replace("webhook__", "hook.") if "__" in name else f"claimed.{name}"
        for name in _COLUMNS
    )
)
_CLAIM_SCAN_SQL: Final = _CLAIM_SQL.format(among="")
_CLAIM_NAMED_SQL: Final = _CLAIM_SQL.format(among="id = ANY(%(ids)s) AND")


def _claim_in_one_statement(
    limit: int, skip_webhooks: Collection[str], ids: Collection[str] | None
) -> list[Claim]:
    """PostgreSQL: rows another claimer is locking right now are skipped, not waited for."""
    now = timezone.now()
    params: dict[str, Any] = {
        "lease": now + lease_duration(),
        "now": now,
        "skip": list(skip_webhooks),
        "limit": limit,
        "ids": list(ids or ()),
    }
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SCAN_SQL if ids is None else _CLAIM_NAMED_SQL, params)
        return _claims_of(cursor.fetchall())


def _claims_of(rows: Iterable[tuple[Any, ...]]) -> list[Claim]:
    split = len(_COLUMNS) - len(STATE_FIELDS)
    return [Claim(*row[:split], DeliveryState(*row[split:])) for row in rows]  # type: ignore[call-arg]


def give_back(claims: Iterable[Claim]) -> None:
    """Release leases whose attempt was never started: due again at once, for anyone."""
    for claim in claims:
        Delivery.objects.filter(
            id=claim.delivery_id, lease_expires_at=claim.lease_expires_at
        ).update(lease_expires_at=None)
