"""What the Application API keeps, and for how long: stored answers to idempotent requests
24 h, owners' links until they expire, the integrations' call records as long as the audit's."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from application.idempotency import KEPT_FOR
from application.models import IdempotentRequest, IntegrationCall, OwnerLink
from gshost.purge import delete_in_batches


def application_purge_expired() -> int:
    """Hourly (django-q schedule `application.purge_expired`); returns how many rows went."""
    now = timezone.now()
    audit_cutoff = now - timedelta(hours=settings.AUDIT_RETENTION_HOURS)
    return (
        delete_in_batches(
            IdempotentRequest.objects.filter(created_at__lt=now - KEPT_FOR).order_by("created_at")
        )
        + delete_in_batches(OwnerLink.objects.filter(expires_at__lt=now).order_by("expires_at"))
        + delete_in_batches(
            IntegrationCall.objects.filter(occurred_at__lt=audit_cutoff).order_by("occurred_at")
        )
    )
