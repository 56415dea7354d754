from dataclasses import dataclass

from django.db.models import QuerySet

from accounts.errors import KeyNotFound
from accounts.models import ApiKey, Membership, Organization, Role, User
from accounts.scopes import Scope
from accounts.ssh_keys import ssh_key_of_person


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


@dataclass(frozen=True)
class SignedInPerson:
    user: User
    ssh_key_id: int | None  # the SSH key they proved, or None for their password


def person_by_credential(
    *, email: str, password: str | None = None, public_key: str | None = None
) -> SignedInPerson | None:
    """The active person of `email` whose panel password this is, or who added this SSH
    public key; None otherwise. An unknown email costs a password hash all the same."""
    user = User.objects.filter(email__iexact=email).first()
    if password is not None:
        if user is None:
            User().set_password(password)  # as long as a check, so timing tells nothing
            return None
        if not (user.check_password(password) and user.is_active):
            return None
        return SignedInPerson(user, None)
    if user is None or public_key is None or not user.is_active:
        return None
    key = ssh_key_of_person(user=user, public_key=public_key)
    return SignedInPerson(user, key.id) if key is not None else None
