"""Writes for webhooks and their deliveries.

Each function owns its transaction and takes the `Actor` who asked, which writes a panel audit
row inside it (an API call is recorded by the request middleware instead). `publish_event`
alone runs in its caller's transaction, so that the deliveries commit (or vanish) with the
change that caused them. Attempts are never made here: rows are written or
marked, and `dispatch.request_attempts` queues "look at these rows" once the data commits.
"""

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Organization
from audit.actors import Actor
from audit.services import PanelAction
from webhooks import dispatch
from webhooks.errors import InvalidWebhookRequest, UnknownEvents, WebhookLimitReached
from webhooks.events import EVENT_NAMES, Event
from webhooks.models import BulkRedelivery, Delivery, DeliveryStatus, Webhook, WebhookStatus
from webhooks.payloads import event_body
from webhooks.ping_limit import ping_slot
from webhooks.secrets import encrypt_secret, new_signing_secret
from webhooks.selectors import delivery_list_for_webhook
from webhooks.targets.signed import send_ping
from webhooks.targets.transport import AttemptResult
from webhooks.targets.url_safety import check_webhook_url

MAX_URL_LENGTH = 2048
MAX_DESCRIPTION_LENGTH = 500
BULK_CHUNK = 500
DEFAULT_GRACE_HOURS = 24
MAX_GRACE_HOURS = 168


def _clean_url(url: str) -> str:
    if len(url) > MAX_URL_LENGTH:
        raise InvalidWebhookRequest({"url": [f"At most {MAX_URL_LENGTH} characters."]})
    check_webhook_url(url)
    return url  # stored exactly as given


def _clean_events(events: Sequence[str]) -> list[str]:
    if not events:
        raise InvalidWebhookRequest({"events": ["Subscribe to at least one event."]})
    unique = list(dict.fromkeys(events))
    unknown = [name for name in unique if name not in EVENT_NAMES]
    if unknown:
        raise UnknownEvents(unknown)
    return unique


def _clean_description(description: str) -> str:
    if len(description) > MAX_DESCRIPTION_LENGTH:
        message = f"At most {MAX_DESCRIPTION_LENGTH} characters."
        raise InvalidWebhookRequest({"description": [message]})
    return description


def _audit(webhook: Webhook, actor: Actor, action: PanelAction) -> None:
    actor.audit(organization_id=webhook.organization_id, action=action)


def webhook_create(
    *,
    organization: Organization,
    url: str,
    events: Sequence[str],
    description: str = "",
    actor: Actor,
) -> tuple[Webhook, str]:
    """A new webhook and its signing secret, which nobody can read again after this."""
    url = _clean_url(url)
    subscribed = _clean_events(events)
    description = _clean_description(description)
    secret = new_signing_secret()
    now = timezone.now()
    with transaction.atomic():
        _check_webhook_limit(organization)
        webhook = Webhook.objects.create(
            organization=organization,
            url=url,
            events=subscribed,
            description=description,
            encrypted_secret=encrypt_secret(secret),
            created_at=now,
            updated_at=now,
        )
        _audit(webhook, actor, PanelAction.WEBHOOK_CREATE)
    return webhook, secret


def _check_webhook_limit(organization: Organization) -> None:
    """Refuse a webhook past the limit. The organization's row is locked first, so concurrent
    creations are counted one after the other (SQLite writes one at a time anyway)."""
    limit = settings.WEBHOOKS_PER_ORGANIZATION
    Organization.objects.select_for_update().filter(pk=organization.pk).first()
    if Webhook.objects.filter(organization=organization).count() >= limit:
        raise WebhookLimitReached(limit)


def _changes(
    events: Sequence[str] | None, url: str | None, description: str | None
) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if url is not None:
        changes["url"] = _clean_url(url)
    if events is not None:
        changes["events"] = _clean_events(events)
    if description is not None:
        changes["description"] = _clean_description(description)
    return changes


def webhook_update(
    *,
    webhook: Webhook,
    events: Sequence[str] | None = None,
    url: str | None = None,
    description: str | None = None,
    actor: Actor,
) -> Webhook:
    """Change what is given (None leaves a field as it is); a new URL is checked again."""
    changes = _changes(events, url, description)
    with transaction.atomic():
        if changes:
            changes["updated_at"] = timezone.now()
            Webhook.objects.filter(pk=webhook.pk).update(**changes)
            for name, value in changes.items():
                setattr(webhook, name, value)
        _audit(webhook, actor, PanelAction.WEBHOOK_UPDATE)
    return webhook


def webhook_delete(*, webhook: Webhook, actor: Actor) -> None:
    """Remove the webhook with its deliveries and their attempts.

    Pending deliveries go with it, which is what cancels them: the engine finds no row to
    attempt.
    """
    with transaction.atomic():
        _audit(webhook, actor, PanelAction.WEBHOOK_DELETE)
        Webhook.objects.filter(pk=webhook.pk).delete()


def _clean_grace_hours(grace_hours: int) -> int:
    if isinstance(grace_hours, bool) or not 0 <= grace_hours <= MAX_GRACE_HOURS:
        message = f"A whole number of hours from 0 to {MAX_GRACE_HOURS}."
        raise InvalidWebhookRequest({"grace_hours": [message]})
    return grace_hours


def webhook_roll_secret(
    *,
    webhook: Webhook,
    grace_hours: int = DEFAULT_GRACE_HOURS,
    actor: Actor,
) -> tuple[Webhook, str]:
    """A new signing secret, returned this once; the old one keeps signing for `grace_hours`.

    Two secrets at most: rolling again during a grace period ends that grace at once (the
    secret being replaced now becomes the previous one). The row is locked, so concurrent
    rolls happen one after the other.
    """
    grace = timedelta(hours=_clean_grace_hours(grace_hours))
    secret = new_signing_secret()
    with transaction.atomic():
        current = Webhook.objects.select_for_update().get(pk=webhook.pk)
        now = timezone.now()
        changes: dict[str, Any] = {
            "encrypted_secret": encrypt_secret(secret),
            "encrypted_previous_secret": current.encrypted_secret if grace else "",
            "previous_secret_expires_at": now + grace if grace else None,
            "updated_at": now,
        }
        Webhook.objects.filter(pk=webhook.pk).update(**changes)
        for name, value in changes.items():
            setattr(webhook, name, value)
        _audit(webhook, actor, PanelAction.WEBHOOK_SECRET_ROLL)
    return webhook, secret


def webhook_send_test(*, webhook: Webhook, actor: Actor) -> AttemptResult:
    """Send the test ping now and return its result; nothing about it is stored but the audit.

    At most PING_CONCURRENCY pings of an organization are under way at once (PingLimitReached).
    """
    with ping_slot(webhook.organization_id) as slot:
        result = send_ping(webhook)
        slot.hold_until(result.lookup_under_way)  # a lookup left running is still this ping
    if actor.panel is not None:  # no transaction to open for an actor who writes no row
        with transaction.atomic():
            _audit(webhook, actor, PanelAction.WEBHOOK_TEST)
    return result


def _subscribed_webhook_ids(organization_id: str, event: Event) -> list[str]:
    # The subscription list is JSON; SQLite cannot search inside it, and an organization has
    # few webhooks, so the match is made here.
    active = Webhook.objects.filter(organization_id=organization_id, status=WebhookStatus.ACTIVE)
    return [pk for pk, events in active.values_list("pk", "events") if event.value in events]


def _pending_delivery(
    webhook_id: str, now: datetime, *, organization_id: str, event: Event, **body: Any
) -> Delivery:
    delivery = Delivery(
        webhook_id=webhook_id,
        organization_id=organization_id,
        event=event.value,
        server_id=body["server_id"],
        status=DeliveryStatus.PENDING,
        created_at=now,
        next_attempt_at=now,
    )
    delivery.body = event_body(event=event, delivery_id=delivery.id, **body)
    return delivery


def publish_event(
    *,
    organization_id: str,
    server_id: str,
    server_name: str,
    event: Event,
    data: dict[str, Any],
    occurred_at: datetime | None = None,
) -> list[Delivery]:
    """One pending delivery per active webhook of the organization subscribed to `event`.

    Runs in the caller's transaction: the rows commit with the change that caused the event,
    and their first attempts are queued only then. The body is fixed here, once.
    """
    now = timezone.now()
    deliveries = [
        _pending_delivery(
            webhook_id,
            now,
            organization_id=organization_id,
            event=event,
            occurred_at=occurred_at or now,
            server_id=server_id,
            server_name=server_name,
            data=data,
        )
        for webhook_id in _subscribed_webhook_ids(organization_id, event)
    ]
    if deliveries:
        Delivery.objects.bulk_create(deliveries)
        dispatch.request_attempts([(delivery.id, delivery.webhook_id) for delivery in deliveries])
    return deliveries


def delivery_request_redelivery(*, delivery: Delivery, actor: Actor) -> Delivery:
    """Ask for one extra attempt now; the engine makes it (trigger `redelivery`)."""
    now = timezone.now()
    with transaction.atomic():
        Delivery.objects.filter(pk=delivery.pk).update(redelivery_requested_at=now)
        delivery.redelivery_requested_at = now
        actor.audit(
            organization_id=delivery.organization_id,
            action=PanelAction.WEBHOOK_REDELIVER,
            server_id=delivery.server_id,
        )
        dispatch.request_attempts([(delivery.id, delivery.webhook_id)])
    return delivery


def _matching_ids(
    webhook: Webhook,
    status: DeliveryStatus | None,
    event: Event | None,
    since: datetime | None,
    until: datetime | None,
    server_restrictions: Collection[str],
) -> list[str]:
    deliveries = delivery_list_for_webhook(
        webhook, status=status, event=event, server_restrictions=server_restrictions
    )
    if since is not None:
        deliveries = deliveries.filter(created_at__gte=since)
    if until is not None:
        deliveries = deliveries.filter(created_at__lt=until)
    return list(deliveries.values_list("pk", flat=True))


def _claim_idempotency_key(webhook: Webhook, key: str) -> BulkRedelivery | None:
    """The earlier request made with `key`, or None after reserving the key for this one.

    A concurrent request with the same key waits on the unique constraint and then sees the
    row the first one committed.
    """
    try:
        with transaction.atomic():
            BulkRedelivery.objects.create(webhook=webhook, idempotency_key=key, count=0)
    except IntegrityError:
        return BulkRedelivery.objects.get(webhook=webhook, idempotency_key=key)
    return None


def _mark_for_redelivery(webhook: Webhook, ids: list[str], moment: datetime) -> None:
    # In chunks: SQLite limits the parameters of one statement, and each chunk is one task.
    for start in range(0, len(ids), BULK_CHUNK):
        chunk = ids[start : start + BULK_CHUNK]
        Delivery.objects.filter(pk__in=chunk).update(redelivery_requested_at=moment)
        dispatch.request_attempts([(delivery_id, webhook.id) for delivery_id in chunk])


def deliveries_request_bulk_redelivery(
    *,
    webhook: Webhook,
    status: DeliveryStatus | None = None,
    event: Event | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    dry_run: bool = False,
    idempotency_key: str | None = None,
    server_restrictions: Collection[str] = (),
    actor: Actor,
) -> int:
    """Ask for one extra attempt of every delivery in the history that matches; how many.

    `since` is inclusive and `until` exclusive (on `created_at`). `dry_run` only counts and
    records nothing. A repeated `idempotency_key` answers the count of the first request and
    queues nothing new. A caller restricted to servers (`server_restrictions`) reaches only
    their deliveries.
    """
    if dry_run:
        return len(_matching_ids(webhook, status, event, since, until, server_restrictions))
    with transaction.atomic():
        if idempotency_key is not None:
            earlier = _claim_idempotency_key(webhook, idempotency_key)
            if earlier is not None:
                return earlier.count
        ids = _matching_ids(webhook, status, event, since, until, server_restrictions)
        _mark_for_redelivery(webhook, ids, timezone.now())
        if idempotency_key is not None:
            BulkRedelivery.objects.filter(webhook=webhook, idempotency_key=idempotency_key).update(
                count=len(ids)
            )
        _audit(webhook, actor, PanelAction.WEBHOOK_REDELIVER)
    return len(ids)
