"""Staff admin for webhooks and deliveries: read-only, and never the signing secret (not even
its encrypted form). Staff may ask for deliveries to be sent again."""

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from audit.actors import Actor
from audit.services import PanelContext
from webhooks.models import Delivery, DeliveryAttempt, Webhook
from webhooks.services import delivery_request_redelivery

WEBHOOK_FIELDS = (
    "id",
    "organization",
    "url",
    "events",
    "description",
    "status",
    "created_at",
    "updated_at",
)  # encrypted_secret deliberately absent

DELIVERY_FIELDS = (
    "id",
    "webhook",
    "organization",
    "event",
    "server_id",
    "status",
    "created_at",
    "next_attempt_at",
    "automatic_attempts",
    "redelivery_requested_at",
    "last_error",
    "lease_expires_at",
    "body",
)

ATTEMPT_FIELDS = (
    "number",
    "trigger",
    "started_at",
    "duration_ms",
    "status_code",
    "error",
    "request_headers",
    "response_headers",
    "response_body",
)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # writes go through the services (and the panel's audit trail)


@admin.register(Webhook)
class WebhookAdmin(ReadOnlyAdmin):
    fields = WEBHOOK_FIELDS
    readonly_fields = WEBHOOK_FIELDS
    list_display = ("id", "url", "organization", "status", "created_at")
    list_filter = ("status", "organization")
    search_fields = ("id", "url", "organization__name", "organization__slug")
    list_select_related = ("organization",)
    ordering = ("-created_at",)


class AttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    fields = ATTEMPT_FIELDS
    readonly_fields = ATTEMPT_FIELDS
    extra = 0
    can_delete = False
    ordering = ("number",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    fields = DELIVERY_FIELDS
    readonly_fields = DELIVERY_FIELDS
    list_display = ("id", "event", "webhook", "server_id", "status", "created_at")
    list_filter = ("status", "event")
    search_fields = ("id", "webhook__id", "server_id", "organization__slug")
    date_hierarchy = "created_at"
    list_select_related = ("webhook",)
    ordering = ("-created_at", "-id")
    inlines = (AttemptInline,)
    actions = ("redeliver_selected",)

    def has_redeliver_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("webhooks.change_delivery")

    @admin.action(description="Redeliver selected deliveries", permissions=["redeliver"])
    def redeliver_selected(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        context = PanelContext(
            user_email=getattr(request.user, "email", ""),
            path=request.path[:500],
            user_agent=request.META.get("HTTP_USER_AGENT", "")[:500],
        )
        count = 0
        for delivery in queryset:
            delivery_request_redelivery(delivery=delivery, actor=Actor.person(context))
            count += 1
        self.message_user(request, f"{count} deliveries will be sent again.", messages.SUCCESS)


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(ReadOnlyAdmin):
    fields = ("delivery", *ATTEMPT_FIELDS)
    readonly_fields = ("delivery", *ATTEMPT_FIELDS)
    list_display = ("delivery", "number", "trigger", "status_code", "error", "started_at")
    list_filter = ("trigger", "error")
    search_fields = ("delivery__id",)
    list_select_related = ("delivery",)
    ordering = ("-started_at",)
