from django.db import models
from django.utils import timezone

from accounts.models import Organization
from gshost.ids import new_id, new_ids


def new_audit_id() -> str:
    return new_id("aud")


def new_audit_ids(count: int) -> list[str]:
    return new_ids("aud", count)


class Source(models.TextChoices):
    API = "api", "API"
    PANEL = "panel", "Panel"
    SYSTEM = "system", "System"
    SFTP = "sftp", "SFTP"


class ActorType(models.TextChoices):
    API_KEY = "api_key", "API key"
    USER = "user", "User"
    SYSTEM = "system", "System"
    INTEGRATION = "integration", "Integration"


class AuditRecord(models.Model):
    """One Customer API call made with an organization's key, one panel action, or one
    action of the platform itself on the organization's keys (a leaked key revoked)."""

    id = models.CharField(primary_key=True, max_length=40, default=new_audit_id)
    # No database constraint and no index of its own (the listing index below leads with it):
    # every API call writes a row, and each check or index costs on every write. Deleting an
    # organization still deletes its records (Django cascades); a row another process had
    # buffered then is written for an id nobody can read, instead of failing its whole batch.
    organization = models.ForeignKey(
        Organization,
        on_delete=models.CASCADE,
        related_name="audit_records",
        db_constraint=False,
        db_index=False,
    )
    occurred_at = models.DateTimeField(default=timezone.now)
    source = models.CharField(max_length=10, choices=Source.choices)
    actor_type = models.CharField(max_length=20, choices=ActorType.choices)
    actor_key_id = models.CharField(max_length=8, blank=True, default="")
    actor_email = models.CharField(max_length=254, blank=True, default="")
    method = models.CharField(max_length=10, blank=True, default="")
    path = models.CharField(max_length=500, blank=True, default="")
    action = models.CharField(max_length=100)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error_code = models.CharField(max_length=50, blank=True, default="")
    server_id = models.CharField(max_length=40, blank=True, default="")
    ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=500, blank=True, default="")
    request_id = models.CharField(max_length=128, blank=True, default="")
    # Where a leaked key was found (key.leak_revoked); empty for every other action.
    url = models.CharField(max_length=2000, blank=True, default="")
    # What the action was about beyond its route, as JSON text (a file action's paths);
    # text, not a JSON column, so the buffer's COPY writes it as it is.
    details = models.TextField(blank=True, default="")

    class Meta:
        indexes = [
            # Ascending, so new rows land at the end of each organization's range; the newest
            # first listing reads it backwards.
            models.Index(
                fields=["organization", "occurred_at", "id"], name="audit_org_listing_idx"
            ),
            models.Index(fields=["occurred_at"], name="audit_occurred_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.status_code} at {self.occurred_at:%Y-%m-%d %H:%M:%S}"
