"""Reads of webhooks and deliveries, always through the caller's organization.

Another organization's webhook or delivery is simply not found: the same
WebhookNotFound (DeliveryNotFound) as an id that never existed.
"""

from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from webhooks.errors import DeliveryNotFound, WebhookNotFound
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
) -> QuerySet[Delivery]:
    """The webhook's deliveries of the last 7 days (older ones are purged, or about to be)."""
    deliveries = Delivery.objects.filter(webhook=webhook, created_at__gte=history_starts_at())
    if status is not None:
        deliveries = deliveries.filter(status=status)
    if event is not None:
        deliveries = deliveries.filter(event=event)
    if server_id is not None:
        deliveries = deliveries.filter(server_id=server_id)
    return deliveries


def delivery_get_for_webhook(webhook: Webhook, delivery_id: str) -> Delivery:
    """One delivery of the webhook's 7-day history, with its attempts."""
    delivery = (
        delivery_list_for_webhook(webhook)
        .filter(pk=delivery_id)
        .prefetch_related("attempts")
        .first()
    )
    if delivery is None:
        raise DeliveryNotFound()
    return delivery
