from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from audit.models import AuditRecord


@admin.register(AuditRecord)
class AuditRecordAdmin(admin.ModelAdmin):
    """A record of what happened is never written or rewritten by hand."""

    list_display = (
        "occurred_at",
        "organization",
        "source",
        "actor",
        "method",
        "path",
        "action",
        "status_code",
        "error_code",
    )
    list_filter = ("source", "actor_type", "status_code", "organization")
    search_fields = ("id", "actor_key_id", "actor_email", "path", "request_id", "server_id")
    date_hierarchy = "occurred_at"
    ordering = ("-occurred_at", "-id")
    list_select_related = ("organization",)

    @admin.display(description="actor")
    def actor(self, record: AuditRecord) -> str:
        return record.actor_key_id or record.actor_email

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
