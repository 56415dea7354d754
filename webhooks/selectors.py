"""Reads of webhooks and deliveries, always through the caller's organization.

Another organization's webhook or delivery is simply not found: the same
WebhookNotFound (DeliveryNotFound) as an id that never existed.
"""

from collections.abc import Collection
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from webhooks.errors import DeliveryNotFound, ServerOutsideRestrictions, WebhookNotFound
from webhooks.events import Event
from webhooks.models import DELIVERY_HISTORY, Delivery, DeliveryStatus, Webhook


def webhook_list_for_org(organization_id: str) -> QuerySet[Webhook]:
    return Webhook.objects.filter(organization_id=organization_id)


def webhook_get_for_org(organization_id: str, webhook_id: str) -> Webhook:
    webhook = webhook_list_for_org(organization_id).filter(pk=webhook_id).first()
    if webhook is None:
        raise WebhookNotFound()
    return webhook


def history_starts_at(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - DELIVERY_HISTORY


def delivery_list_for_webhook(
    webhook: Webhook,
    *,
    status: DeliveryStatus | None = None,
    event: Event | None = None,
    server_id: str | None = None,
    server_restrictions: Collection[str] = (),
) -> QuerySet[Delivery]:
    """The webhook's deliveries of the last 7 days (older ones are purged, or about to be).

    A caller restricted to servers (`server_restrictions`, empty = all) sees only the
    deliveries of its servers; filtering by any other server is ServerOutsideRestrictions.
    """
    if server_restrictions and server_id is not None and server_id not in server_restrictions:
        raise ServerOutsideRestrictions()
    deliveries = Delivery.objects.filter(webhook=webhook, created_at__gte=history_starts_at())
    if server_restrictions:
        deliveries = deliveries.filter(server_id__in=sorted(server_restrictions))
    if status is not None:
        deliveries = deliveries.filter(status=status)
    if event is not None:
        deliveries = deliveries.filter(event=event)
    if server_id is not None:
        deliveries = deliveries.filter(server_id=server_id)
    return deliveries


def delivery_get_for_webhook(
    webhook: Webhook, delivery_id: str, *, server_restrictions: Collection[str] = ()
) -> Delivery:
    """One delivery of the webhook's 7-day history (of the caller's servers), with its attempts."""
    delivery = (
        delivery_list_for_webhook(webhook, server_restrictions=server_restrictions)
        .filter(pk=delivery_id)
        .prefetch_related("attempts")
        .first()
    )
    if delivery is None:
        raise DeliveryNotFound()
    return delivery
