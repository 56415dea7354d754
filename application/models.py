"""The Application API's rows: integration keys, plans, what ties customers and servers to
the integration that made them (its external ids), stored answers to idempotent requests,
the owners' one-time links, and the audit of every call."""

from django.db import models
from django.utils import timezone

from accounts.models import Organization, User
from gshost.ids import new_id
from servers.models import Server


def new_plan_id() -> str:
    return new_id("pln")


def new_call_id() -> str:
    return new_id("aud")


class IntegrationKey(models.Model):
    """A billing system's key (`gsi_…`). Only the secret's peppered hash is stored."""

    key_id = models.CharField(max_length=8, unique=True)
    name = models.CharField(max_length=100)
    secret_hash = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    allowed_ips = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    last_used_ip = models.GenericIPAddressField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} (gsi_{self.key_id})"

    @property
    def prefix(self) -> str:
        return f"gsi_{self.key_id}"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class Plan(models.Model):
    """What a server sold under this plan may use, and how many backups it keeps."""

    id = models.CharField(primary_key=True, max_length=40, default=new_plan_id)
    name = models.CharField(max_length=100)
    memory_mb = models.PositiveIntegerField()
    disk_mb = models.PositiveIntegerField()
    cpu_percent = models.PositiveIntegerField()
    processes = models.PositiveIntegerField()
    backups_limit = models.PositiveIntegerField(default=0)
    tags = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"


class Customer(models.Model):
    """An organization sold through an integration, under that integration's external id."""

    organization = models.OneToOneField(
        Organization, on_delete=models.CASCADE, primary_key=True, related_name="customer"
    )
    integration = models.ForeignKey(IntegrationKey, on_delete=models.PROTECT, related_name="+")
    external_id = models.CharField(max_length=191)
    owner_name = models.CharField(max_length=200, blank=True, default="")
    # The create request's body hash: the same body again answers with this customer.
    request_hash = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["integration", "external_id"], name="one_customer_per_external_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.organization_id} as {self.external_id}"


class SoldServer(models.Model):
    """A server's place in an integration: its external id (unique per integration, so a
    retried create cannot make a second one), its plan, and when its limits last changed."""

    server = models.OneToOneField(
        Server, on_delete=models.CASCADE, primary_key=True, related_name="sold"
    )
    integration = models.ForeignKey(IntegrationKey, on_delete=models.PROTECT, related_name="+")
    # NULL, not "", for a server without one: the unique constraint keys on it.
    external_id = models.CharField(max_length=191, null=True, blank=True)  # noqa: DJ001
    plan = models.ForeignKey(
        Plan, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # The create request's body hash: the same body again answers with this server.
    request_hash = models.CharField(max_length=64, blank=True, default="")
    limits_changed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["integration", "external_id"], name="one_server_per_external_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.server_id} as {self.external_id}"


class IdempotentRequest(models.Model):
    """One `Idempotency-Key` of an integration: inserted before the request is carried out
    (the unique constraint lets exactly one request in), completed with its answer."""

    integration = models.ForeignKey(IntegrationKey, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # What the first request was about, for the audit of its replays.
    organization_id = models.CharField(max_length=40, blank=True, default="")
    server_id = models.CharField(max_length=40, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["integration", "key"], name="one_request_per_key")
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotent_created_idx")]

    def __str__(self) -> str:
        return f"Idempotency-Key {self.key}"


class LinkPurpose(models.TextChoices):
    SET_PASSWORD = "set_password", "Set a password"
    SIGN_IN = "sign_in", "Sign in"


class OwnerLink(models.Model):
    """A one-time link for a customer's owner: to set a first password, or to sign in. Only
    a hash of its token is kept."""

    token_hash = models.CharField(max_length=64, unique=True)
    purpose = models.CharField(max_length=20, choices=LinkPurpose.choices)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["expires_at"], name="owner_link_expires_idx")]

    def __str__(self) -> str:
        return f"{self.purpose} link of {self.user_id}"


class IntegrationCall(models.Model):
    """One call to the Application API made with an integration key, whatever its answer."""

    id = models.CharField(primary_key=True, max_length=40, default=new_call_id)
    integration = models.ForeignKey(IntegrationKey, on_delete=models.CASCADE, related_name="calls")
    occurred_at = models.DateTimeField(default=timezone.now)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=500)
    action = models.CharField(max_length=100)
    status_code = models.PositiveSmallIntegerField()
    error_code = models.CharField(max_length=50, blank=True, default="")
    organization_id = models.CharField(max_length=40, blank=True, default="")
    server_id = models.CharField(max_length=40, blank=True, default="")
    ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=500, blank=True, default="")
    request_id = models.CharField(max_length=128, blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["integration", "occurred_at"], name="integration_call_idx"),
            models.Index(fields=["occurred_at"], name="integration_call_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.method} {self.path} {self.status_code}"
