from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from audit.buffer import audit_buffer
from audit.models import AuditRecord


@dataclass(frozen=True)
class AuditFilters:
    key_id: str | None = None
    status_code: int | None = None
    rejected_only: bool = False
    server_id: str | None = None
    since: datetime | None = None


def audit_list(*, organization_id: str, filters: AuditFilters) -> QuerySet[AuditRecord]:
    """The organization's records of the last 24 hours, newest first."""
    audit_buffer.flush()  # what this process has recorded is visible to its own reads
    window_start = timezone.now() - timedelta(hours=settings.AUDIT_RETENTION_HOURS)
    since = max(filters.since, window_start) if filters.since else window_start
    records = AuditRecord.objects.filter(organization_id=organization_id, occurred_at__gte=since)
    if filters.key_id:
        records = records.filter(actor_key_id=filters.key_id)
    if filters.status_code is not None:
        records = records.filter(status_code=filters.status_code)
    if filters.rejected_only:
        records = records.filter(status_code__gte=400)
    if filters.server_id:
        records = records.filter(server_id=filters.server_id)
    return records.order_by("-occurred_at", "-id")
