"""Taking delivery rows for an attempt (a lease) and giving them back with the outcome.

A row is due when an automatic attempt is due (pending or retry_scheduled, next_attempt_at
reached) or a redelivery was asked for, and nobody holds it: no lease, or a lease that ran out
because its worker died. Claiming sets the lease; nothing else changes until the attempt is
recorded, so a claim that is never finished simply becomes due again when its lease expires.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Q, QuerySet
from django.db.models.query import RawQuerySet
from django.utils import timezone

from gshost.pg_copy import copy_into
from webhooks.attempts import FINAL_ERRORS
from webhooks.models import (
    AttemptTrigger,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    Webhook,
)
from webhooks.sender import AttemptResult

OPEN_STATUSES: Final = (DeliveryStatus.PENDING, DeliveryStatus.RETRY_SCHEDULED)
_CLAIM_FIELDS: Final = (
    "id",
    "webhook_id",
    "event",
    "body",
    "lease_expires_at",
    "redelivery_requested_at",
    "webhook__url",
    "webhook__encrypted_secret",
)
_JSON_COLUMNS: Final = frozenset({"request_headers", "response_headers"})
_STATE_FIELDS: Final = (
    "status",
    "next_attempt_at",
    "automatic_attempts",
    "lease_expires_at",
    "redelivery_requested_at",
    "last_error",
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
    trigger: AttemptTrigger
    lease_expires_at: datetime
    redelivery_requested_at: datetime | None


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
    f'UPDATE "{Delivery._meta.db_table}" AS claimed SET lease_expires_at = %(lease)s '  # noqa: S608
    f'FROM "{Webhook._meta.db_table}" AS hook '
    "WHERE hook.id = claimed.webhook_id AND claimed.id IN ("
    f'SELECT id FROM "{Delivery._meta.db_table}" WHERE id = ANY(%(ids)s) '
    "AND ((status = ANY(%(open)s) AND next_attempt_at <= %(now)s) "
    "OR redelivery_requested_at IS NOT NULL) "
    "AND (lease_expires_at IS NULL OR lease_expires_at < %(now)s) "
    "FOR UPDATE SKIP LOCKED) "
    "RETURNING claimed.id, claimed.webhook_id, hook.url, hook.encrypted_secret, "
    "claimed.event, claimed.body, claimed.redelivery_requested_at"
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
            trigger=AttemptTrigger.REDELIVERY if redelivery else AttemptTrigger.AUTOMATIC,
            lease_expires_at=lease,
            redelivery_requested_at=redelivery,
        )
        for delivery_id, webhook_id, url, encrypted_secret, event, body, redelivery in rows
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
            ).update(lease_expires_at=lease)
        except DatabaseError as error:
            raise ClaimInterrupted(taken) from error
        if changed == 1:
            taken.append(_claim_of(row, lease))
    return taken


def _claim_of(row: Delivery, lease: datetime) -> Claim:
    redelivery = row.redelivery_requested_at is not None
    return Claim(
        delivery_id=row.id,
        webhook_id=row.webhook_id,
        url=row.webhook.url,
        encrypted_secret=row.webhook.encrypted_secret,
        event=row.event,
        body=row.body,
        trigger=AttemptTrigger.REDELIVERY if redelivery else AttemptTrigger.AUTOMATIC,
        lease_expires_at=lease,
        redelivery_requested_at=row.redelivery_requested_at,
    )


# --- giving rows back ------------------------------------------------------------------------


def record_attempts(finished: Sequence[Finished]) -> list[tuple[str, str]]:
    """Write each attempt and its delivery's new state in one transaction; release the leases.

    Returns (delivery id, webhook id) of rows that are due again at once (a redelivery asked
    for while another attempt was in flight), so the caller can pick them up without waiting.
    """
    if not finished:
        return []
    now = timezone.now()
    with transaction.atomic():
        ids = {done.claim.delivery_id for done in finished}
        rows = {row.id: row for row in _locked_with_attempt_counts(ids)}
        new_attempts, changed = [], {}
        for done in finished:
            row = rows.get(done.claim.delivery_id)
            if row is None:
                continue  # deleted meanwhile (webhook deleted, history purged)
            row.attempt_count += 1  # type: ignore[attr-defined]
            new_attempts.append(_attempt_values(done, row.attempt_count))  # type: ignore[attr-defined]
            if _apply_outcome(row, done, now):
                changed[row.id] = row
        _insert_attempts(new_attempts)
        _save_states(changed.values())
    return [(row.id, row.webhook_id) for row in changed.values() if _due_again(row, now)]


def _save_states(rows: Iterable[Delivery]) -> None:
    """One UPDATE per distinct new state: a batch of successes is a single statement.

    Plain SQL: compiling an ORM update per batch cost more than running it.
    """
    groups: dict[tuple[Any, ...], list[str]] = {}
    for row in rows:
        groups.setdefault(tuple(getattr(row, name) for name in _STATE_FIELDS), []).append(row.id)
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(name)} = %s" for name in _STATE_FIELDS)
    concrete = {f.name: f for f in Delivery._meta.concrete_fields}
    fields = [concrete[name] for name in _STATE_FIELDS]
    with connection.cursor() as cursor:
        for state, ids in groups.items():
            values = [f.get_db_prep_save(v, connection) for f, v in zip(fields, state, strict=True)]
            placeholders = ", ".join(["%s"] * len(ids))
            # Only model metadata and placeholders are interpolated.
            cursor.execute(
                f"UPDATE {quote(Delivery._meta.db_table)} SET {assignments} "  # noqa: S608
                f"WHERE id IN ({placeholders})",
                [*values, *ids],
            )


def _due_again(row: Delivery, now: datetime) -> bool:
    if row.redelivery_requested_at is not None:
        return True
    return (
        row.status in OPEN_STATUSES
        and row.next_attempt_at is not None
        and (row.next_attempt_at <= now)
    )


def _locked_with_attempt_counts(ids: Collection[str]) -> RawQuerySet[Delivery]:
    """The rows, locked, each annotated with how many attempts it has (``attempt_count``).

    Plain SQL for the same reason as ``_save_states``.
    """
    quote = connection.ops.quote_name
    deliveries, attempts = quote(Delivery._meta.db_table), quote(DeliveryAttempt._meta.db_table)
    columns = ", ".join(f"d.{quote(name)}" for name in ("id", "webhook_id", *_STATE_FIELDS))
    placeholders = ", ".join(["%s"] * len(ids))
    lock = " FOR UPDATE OF d" if connection.features.has_select_for_update_of else ""
    # Only model metadata and placeholders are interpolated.
    sql = (
        f"SELECT {columns}, (SELECT COUNT(*) FROM {attempts} AS a "  # noqa: S608
        f"WHERE a.delivery_id = d.id) AS attempt_count "
        f"FROM {deliveries} AS d WHERE d.id IN ({placeholders}){lock}"
    )
    return Delivery.objects.raw(sql, list(ids))


def _attempt_values(done: Finished, number: int) -> dict[str, Any]:
    result = done.result
    return {
        "delivery_id": done.claim.delivery_id,
        "number": number,
        "trigger": done.claim.trigger.value,
        "started_at": result.started_at,
        "duration_ms": result.duration_ms,
        "status_code": result.status_code,
        "response_body": result.response_body,
        "request_headers": result.request_headers,
        "response_headers": result.response_headers,
        "error": result.error or "",
    }


def _insert_attempts(attempts: list[dict[str, Any]]) -> None:
    """COPY on PostgreSQL: building and compiling model instances was most of a recorded batch's
    cost. Elsewhere a plain ``bulk_create``."""
    if not attempts:
        return
    if connection.vendor != "postgresql":
        DeliveryAttempt.objects.bulk_create(DeliveryAttempt(**values) for values in attempts)
        return
    with copy_into(DeliveryAttempt, list(attempts[0])) as copy:
        for values in attempts:
            copy.write_row(
                [
                    json.dumps(value) if column in _JSON_COLUMNS else value
                    for column, value in values.items()
                ]
            )


def _apply_outcome(row: Delivery, done: Finished, now: datetime) -> bool:
    """Move ``row`` to its state after this attempt; False when the row is not ours to move."""
    if row.lease_expires_at != done.claim.lease_expires_at:
        return False  # our lease ran out and another worker holds the row: it decides
    row.lease_expires_at = None
    if done.claim.trigger == AttemptTrigger.REDELIVERY:
        _apply_redelivery(row, done)
    elif row.status in OPEN_STATUSES:
        _apply_automatic(row, done.result, now)
    return True


def _apply_redelivery(row: Delivery, done: Finished) -> None:
    """Success settles the delivery; a failure leaves the retry plan exactly as it was."""
    if row.redelivery_requested_at == done.claim.redelivery_requested_at:
        row.redelivery_requested_at = None  # a newer request, made during the attempt, stays
    if done.result.succeeded:
        row.status = DeliveryStatus.SUCCESS
        row.next_attempt_at = None
        row.last_error = ""


def _apply_automatic(row: Delivery, result: AttemptResult, now: datetime) -> None:
    row.automatic_attempts += 1
    row.last_error = _error_label(result)
    delays = list(settings.WEBHOOK_RETRY_DELAYS)
    if result.succeeded:
        row.status, row.next_attempt_at = DeliveryStatus.SUCCESS, None
    elif result.error in FINAL_ERRORS or row.automatic_attempts > len(delays):
        row.status, row.next_attempt_at = DeliveryStatus.FAILED, None
    else:
        delay = timedelta(seconds=delays[row.automatic_attempts - 1])
        row.status, row.next_attempt_at = DeliveryStatus.RETRY_SCHEDULED, now + delay


def _error_label(result: AttemptResult) -> str:
    if result.succeeded:
        return ""
    return result.error or f"status_{result.status_code}"
