"""Staff admin. No secret is ever displayed: a key's hash is not even a field here."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from accounts.models import ApiKey, Membership, Organization, SshKey, User
from accounts.panel_sessions import panel_session_rekey
from accounts.passwords import password_changed
from accounts.scopes import Scope
from accounts.services import api_key_revoke, member_remove, membership_save
from audit.actors import Actor
from audit.services import PanelContext


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    fields = ("user", "role", "scopes", "created_at")
    readonly_fields = ("created_at",)
    autocomplete_fields = ("user",)


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "id", "created_at")
    search_fields = ("name", "slug", "id")
    readonly_fields = ("id", "created_at")
    inlines = (MembershipInline,)

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        """Memberships change through the services, which withdraw a removed or narrowed
        member's console sockets and SFTP sessions."""
        if formset.model is not Membership:
            super().save_formset(request, form, formset, change)
            return
        for membership in formset.save(commit=False):
            membership_save(membership=membership)
        for membership in formset.deleted_objects:
            member_remove(membership=membership)


class EmailUserCreationForm(AdminUserCreationForm):
    class Meta:
        model = User
        fields = ("email",)

    def clean_email(self) -> str:
        return User.objects.normalize_email(self.cleaned_data["email"]).lower()


class EmailUserChangeForm(UserChangeForm):
    class Meta:
        model = User
        fields = "__all__"


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    """Django's user admin, with the email address where the username would be."""

    form = EmailUserChangeForm
    add_form = EmailUserCreationForm

    def user_change_password(
        self, request: HttpRequest, id: str, form_url: str = ""
    ) -> HttpResponse:
        """Django's page; a password saved there (its answer is a redirect) is followed as
        every new password is: audited, and the person's other sessions end."""
        old_key = request.session.session_key
        response = super().user_change_password(request, id, form_url)
        if request.method != "POST" or response.status_code != 302:
            return response
        user = self.get_object(request, unquote(id))
        if user is not None:
            if user.pk == request.user.pk:  # Django kept them signed in, on a new key
                panel_session_rekey(old_key, request.session.session_key)
            password_changed(
                user=user,
                context=PanelContext.from_request(request),
                keep_session_key=request.session.session_key,
            )
        return response

    fieldsets = (
        (None, {"fields": ("email", "password")}),
        (
            "Permissions",
            {"fields": ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")},
        ),
        ("Important dates", {"fields": ("last_login", "date_joined")}),
    )
    add_fieldsets = (
        (
            None,
            {
                "classes": ("wide",),
                "fields": ("email", "usable_password", "password1", "password2"),
            },
        ),
    )
    list_display = ("email", "is_staff", "is_superuser", "is_active", "date_joined")
    list_filter = ("is_staff", "is_superuser", "is_active")
    search_fields = ("email",)
    ordering = ("email",)


class MembershipForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=[(scope.value, scope.value) for scope in Scope],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Ignored for owners, who hold every scope.",
    )

    class Meta:
        model = Membership
        fields = ("user", "organization", "role", "scopes")


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    form = MembershipForm
    list_display = ("user", "organization", "role", "created_at")
    list_filter = ("role", "organization")
    search_fields = ("user__email", "organization__name", "organization__slug")
    autocomplete_fields = ("user", "organization")
    list_select_related = ("user", "organization")

    # Through the services: a scope taken away, or the membership removed, withdraws the
    # person's open console sockets on the organization's servers.
    def save_model(self, request: HttpRequest, obj: Membership, form: Any, change: bool) -> None:
        membership_save(membership=obj)

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        member_remove(membership=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Membership]) -> None:
        for membership in queryset:
            member_remove(membership=membership)


KEY_FIELDS = (
    "key_id",
    "name",
    "organization",
    "description",
    "scopes",
    "server_restrictions",
    "allowed_ips",
    "expires_at",
    "created_at",
    "created_by",
    "last_used_at",
    "last_used_ip",
    "replaced_by",
    "rotated_at",
    "revoked_at",
    "revoked_reason",
    "leak_source",
    "leak_url",
)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Read-only: keys are minted in the panel; staff may only revoke them."""

    fields = KEY_FIELDS  # secret_hash deliberately absent
    readonly_fields = KEY_FIELDS
    list_display = ("key_id", "name", "organization", "status", "expires_at", "last_used_at")
    list_filter = ("revoked_reason", "organization")
    search_fields = ("key_id", "name", "organization__name", "organization__slug")
    list_select_related = ("organization",)
    ordering = ("-created_at",)
    actions = ("revoke_selected",)

    @admin.display(description="status")
    def status(self, key: ApiKey) -> str:
        return key.status_at(timezone.now()).value

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead: the row is the key's history

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("accounts.change_apikey")

    @admin.action(description="Revoke selected keys", permissions=["revoke"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        context = PanelContext(
            user_email=getattr(request.user, "email", ""),
            path=request.path[:500],
            user_agent=request.META.get("HTTP_USER_AGENT", "")[:500],
        )
        revoked = 0
        for key in queryset.filter(revoked_at__isnull=True):
            api_key_revoke(key=key, actor=Actor.person(context))
            revoked += 1
        self.message_user(request, f"Revoked {revoked} key(s).", messages.SUCCESS)


@admin.register(SshKey)
class SshKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "user", "key_type", "fingerprint", "created_at", "last_used_at")
    search_fields = ("user__email", "name", "fingerprint")
    readonly_fields = (
        "user",
        "key_type",
        "public_key",
        "fingerprint",
        "created_at",
        "last_used_at",
    )
