"""The 7-day delivery history: older deliveries and their attempts are deleted in batches,
and with them the endpoint stats' hourly counts (``rollup``) of the hours they were in."""

from __future__ import annotations

from typing import Final

from django.db import transaction
from django.utils import timezone

from webhooks.health import rollup
from webhooks.models import DELIVERY_HISTORY, Delivery, DeliveryAttempt

PURGE_BATCH: Final = 1000


def purge_delivery_history() -> int:
    """Delete deliveries (and their attempts) older than the history window, in batches."""
    cutoff = timezone.now() - DELIVERY_HISTORY
    purged = 0
    while True:
        ids = list(
            Delivery.objects.filter(created_at__lt=cutoff).values_list("id", flat=True)[
                :PURGE_BATCH
            ]
        )
        if not ids:
            rollup.purge_before(cutoff)  # the stats' hourly counts of the purged deliveries
            return purged
        with transaction.atomic():
            DeliveryAttempt.objects.filter(delivery_id__in=ids).delete()
            purged += Delivery.objects.filter(id__in=ids).delete()[0]
