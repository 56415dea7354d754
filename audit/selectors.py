from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from audit.buffer import audit_buffer
from audit.errors import ServerOutsideRestrictions
from audit.models import AuditRecord


@dataclass(frozen=True)
class AuditFilters:
    key_id: str | None = None
    status_code: int | None = None
    rejected_only: bool = False
    server_id: str | None = None
    since: datetime | None = None


def audit_list(
    *,
    organization_id: str,
    filters: AuditFilters,
    server_restrictions: Collection[str] = (),
) -> QuerySet[AuditRecord]:
    """The organization's records of the last 24 hours, newest first.

    A caller restricted to servers (`server_restrictions`, empty = all) reads only records
    with no server or one of its servers; filtering by any other server is 404
    server_not_found, the same answer as for a server that does not exist.
    """
    if server_restrictions and filters.server_id and filters.server_id not in server_restrictions:
        raise ServerOutsideRestrictions
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
    if server_restrictions:
        records = records.filter(Q(server_id="") | Q(server_id__in=sorted(server_restrictions)))
    if filters.server_id:
        records = records.filter(server_id=filters.server_id)
    return records.order_by("-occurred_at", "-id")
