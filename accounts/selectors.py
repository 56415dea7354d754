from django.db.models import QuerySet

from accounts.errors import KeyNotFound
from accounts.models import ApiKey, Membership, Organization, Role
from accounts.scopes import Scope


def organization_get_by_slug(slug: str) -> Organization | None:
    return Organization.objects.filter(slug=slug).first()


def api_key_list_live(organization_id: str) -> QuerySet[ApiKey]:
    """The organization's keys that are not revoked (active, expired or in rotation grace)."""
    return ApiKey.objects.filter(
        organization_id=organization_id, revoked_at__isnull=True
    ).select_related("created_by")


def api_key_list_for_panel(organization_id: str) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(organization_id=organization_id).select_related("created_by")


def api_key_list_for_person(membership: Membership) -> QuerySet[ApiKey]:
    """With `keys:read`, every key of the organization; without it, the person's own keys."""
    keys = api_key_list_for_panel(membership.organization_id)
    if Scope.KEYS_READ in membership.held_scopes:
        return keys
    return keys.filter(created_by_id=membership.user_id)


def api_key_get(organization_id: str, key_id: str) -> ApiKey:
    """The organization's key (KeyNotFound otherwise)."""
    try:
        return ApiKey.objects.select_related("created_by").get(
            organization_id=organization_id, key_id=key_id
        )
    except ApiKey.DoesNotExist:
        raise KeyNotFound() from None


def memberships_of(user_id: int) -> QuerySet[Membership]:
    return Membership.objects.filter(user_id=user_id).select_related("organization")


def owner_emails(organization_id: str) -> list[str]:
    owners = Membership.objects.filter(organization_id=organization_id, role=Role.OWNER)
    return sorted(set(owners.values_list("user__email", flat=True)))
