"""Staff mint integration keys here (the key is shown once, in the message after saving) and
revoke them. No secret, not even its hash, is a field here."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from application.integration_keys import (
    clean_networks,
    integration_key_create,
    integration_key_revoke,
)
from application.models import IntegrationCall, IntegrationKey, Plan
from application.scopes import IntegrationScope
from gshost.errors import DomainError


class IntegrationKeyForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=[(scope.value, scope.value) for scope in IntegrationScope],
        widget=forms.CheckboxSelectMultiple,
    )
    allowed_ips = forms.CharField(
        required=False, help_text="Comma-separated CIDRs; empty means anywhere."
    )

    class Meta:
        model = IntegrationKey
        fields = ("name", "scopes", "allowed_ips")

    def clean_allowed_ips(self) -> list[str]:
        try:
            return clean_networks(str(self.cleaned_data.get("allowed_ips") or "").split(","))
        except DomainError as refused:
            raise forms.ValidationError(refused.message) from None


@admin.register(IntegrationKey)
class IntegrationKeyAdmin(admin.ModelAdmin):
    form = IntegrationKeyForm
    list_display = ("name", "prefix", "scopes", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "created_at", "created_by", "last_used_at", "last_used_ip")
    actions = ("revoke",)

    def get_fields(self, request: HttpRequest, obj: IntegrationKey | None = None) -> Any:
        if obj is None:
            return ("name", "scopes", "allowed_ips")
        return ("name", "prefix", "scopes", "allowed_ips", *self.readonly_fields[1:], "revoked_at")

    def get_readonly_fields(self, request: HttpRequest, obj: IntegrationKey | None = None) -> Any:
        if obj is None:
            return ()
        return ("name", "prefix", "scopes", "allowed_ips", *self.readonly_fields[1:], "revoked_at")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def save_model(
        self, request: HttpRequest, obj: IntegrationKey, form: Any, change: bool
    ) -> None:
        if change:
            return
        data = form.cleaned_data
        minted = integration_key_create(
            name=data["name"],
            scopes=data["scopes"],
            allowed_ips=data["allowed_ips"],
            created_by=request.user if request.user.is_authenticated else None,
        )
        obj.pk, obj.key_id, obj.name = minted.key.pk, minted.key.key_id, minted.key.name
        messages.warning(
            request,
            f"Integration key {minted.key.name}: {minted.full_key} -- copy it now, it is not "
            "shown again.",
        )

    @admin.action(description="Revoke the selected keys (permanent)")
    def revoke(self, request: HttpRequest, queryset: QuerySet[IntegrationKey]) -> None:
        for key in queryset.filter(revoked_at__isnull=True):
            integration_key_revoke(key=key)
        messages.success(request, "Revoked.")


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    list_display = ("name", "id", "memory_mb", "disk_mb", "cpu_percent", "processes")
    readonly_fields = ("id", "created_at")


@admin.register(IntegrationCall)
class IntegrationCallAdmin(admin.ModelAdmin):
    """Every call made with an integration key: read only."""

    list_display = ("occurred_at", "integration", "method", "path", "status_code", "error_code")
    list_filter = ("integration", "status_code")
    search_fields = ("path", "organization_id", "server_id", "request_id")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
