from datetime import timedelta

from django.db import models
from django.utils import timezone

from accounts.models import Organization
from gshost.ids import new_id
from webhooks.events import Event

# Deliveries (with their attempts) are shown for this long, then purged.
DELIVERY_HISTORY = timedelta(days=7)


def new_webhook_id() -> str:
    return new_id("whk")


def new_delivery_id() -> str:
    return new_id("dlv")


class WebhookStatus(models.TextChoices):
    ACTIVE = "active", "Active"  # webhooks never auto-disable


class Webhook(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=new_webhook_id)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="webhooks"
    )
    url = models.CharField(max_length=2048)  # stored exactly as given
    events = models.JSONField(default=list)
    description = models.CharField(max_length=500, blank=True, default="")
    status = models.CharField(
        max_length=20, choices=WebhookStatus.choices, default=WebhookStatus.ACTIVE
    )
    encrypted_secret = models.TextField()  # Fernet token of the `whsec_` secret
    # After a roll, the secret it replaced keeps signing (beside the new one) until this time.
    encrypted_previous_secret = models.TextField(blank=True, default="")
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    # When the owners were last told a delivery failed; claimed by compare-and-set.
    failure_notice_sent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["organization", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.url} ({self.id})"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SUCCESS = "success", "Success"
    RETRY_SCHEDULED = "retry_scheduled", "Retry scheduled"
    FAILED = "failed", "Failed"


class Delivery(models.Model):
    """One event for one webhook. State lives here; the queue only says "look at row N"."""

    id = models.CharField(primary_key=True, max_length=40, default=new_delivery_id)
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    event = models.CharField(max_length=40, choices=[(e.value, e.value) for e in Event])
    server_id = models.CharField(max_length=40, blank=True, default="")
    body = models.TextField()  # the exact compact JSON sent, byte for byte, on every attempt
    status = models.CharField(
        max_length=20, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    created_at = models.DateTimeField(default=timezone.now)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    automatic_attempts = models.PositiveSmallIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # A redelivery asked for through the API or panel: one extra attempt, outside the plan.
    redelivery_requested_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=40, blank=True, default="")
    # For the endpoint's health: set when the first attempt is claimed, and when it succeeds.
    first_attempt_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The endpoint stats count a webhook's open deliveries; few rows are open.
            models.Index(
                fields=["webhook", "created_at"],
                condition=models.Q(status__in=["pending", "retry_scheduled"]),
                name="delivery_open_by_webhook",
            ),
            models.Index(fields=["webhook", "-created_at", "-id"]),
            models.Index(fields=["status", "next_attempt_at"]),
            # The engine's due scan walks open rows in due order, stopping at the first free ones
            # (a sequential scan read 2,300 rows per delivery during a burst).
            models.Index(
                fields=["next_attempt_at"],
                condition=models.Q(status__in=["pending", "retry_scheduled"]),
                name="delivery_due_open",
            ),
            models.Index(fields=["created_at"]),
            # The engine's timer looks for asked-for redeliveries every second; few rows have one.
            models.Index(
                fields=["redelivery_requested_at"],
                condition=models.Q(redelivery_requested_at__isnull=False),
                name="delivery_redelivery_asked",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} -> {self.webhook_id} ({self.id})"


class AttemptTrigger(models.TextChoices):
    AUTOMATIC = "automatic", "Automatic"
    REDELIVERY = "redelivery", "Redelivery"


class AttemptError(models.TextChoices):
    TIMEOUT = "timeout", "Timeout"
    CONNECTION_ERROR = "connection_error", "Connection error"
    TLS_ERROR = "tls_error", "TLS error"
    REDIRECT = "redirect", "Redirect"
    ADDRESS_REJECTED = "address_rejected", "Address rejected"
    SIGNING_SECRET_UNUSABLE = "signing_secret_unusable", "Signing secret unusable"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveSmallIntegerField()
    trigger = models.CharField(max_length=20, choices=AttemptTrigger.choices)
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField(default=0)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True, default="")
    request_headers = models.JSONField(default=dict)
    response_headers = models.JSONField(default=dict)
    error = models.CharField(max_length=40, choices=AttemptError.choices, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="one_attempt_number")
        ]
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.delivery_id}"


class BulkRedelivery(models.Model):
    """Remembers an Idempotency-Key so that a repeated bulk redelivery creates nothing new."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="+")
    idempotency_key = models.CharField(max_length=200)
    count = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["webhook", "idempotency_key"], name="one_bulk_redelivery_per_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.idempotency_key} ({self.count})"


class DeliveryOutcomeCount(models.Model):
    """How many deliveries of a webhook, created in one hour, ended in one outcome, with one
    latency bucket (success) - kept up to date by the engine as it records attempts, so that the
    endpoint stats read a few hundred rows instead of a week of deliveries."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()  # the hour the deliveries were created in (UTC)
    outcome = models.CharField(max_length=20, choices=DeliveryStatus.choices)
    latency_bucket = models.SmallIntegerField(
        default=0
    )  # see webhooks.health.rollup; 0 for failures
    count = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["webhook", "hour", "outcome", "latency_bucket"],
                name="one_outcome_count_per_bucket",
            )
        ]

    def __str__(self) -> str:
        return f"{self.webhook_id} {self.hour:%Y-%m-%d %H}h {self.outcome}: {self.count}"
