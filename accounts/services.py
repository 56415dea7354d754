"""Writes for organizations, people and API keys. Each owns its transaction and audit row."""

import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from accounts import key_records, keys
from accounts import scopes as scope_catalogue
from accounts.authentication import hash_key_secret
from accounts.errors import (
    KeyDeletionRefused,
    KeyIdsExhausted,
    KeyNotFound,
    KeyNotRotatable,
    KeyRequestRefused,
    ScopeExceedsPermissions,
    SelfRevocationOnly,
)
from accounts.key_records import KeyRecord
from accounts.models import (
    ApiKey,
    KeyStatus,
    LeakSource,
    Membership,
    Organization,
    RevocationReason,
    Role,
    SshKey,
    User,
)
from accounts.passwords import password_set
from accounts.scopes import Scope
from accounts.selectors import api_key_get, owner_emails
from audit.actors import Actor
from audit.services import PanelAction, PanelContext
from gshost.withdrawals import withdraw_access
from servers.selectors import server_ids_in_organization, server_list_for_organization

logger = logging.getLogger(__name__)

DEFAULT_EXPIRY_DAYS = 90
MAX_EXPIRY_DAYS = 365
DEFAULT_GRACE_HOURS = 24
MAX_GRACE_HOURS = 168


@dataclass(frozen=True)
class NewKey:
    key: ApiKey
    full_key: str = field(repr=False)  # shown once, never stored, never in a repr


def organization_create(*, slug: str, name: str) -> Organization:
    return Organization.objects.create(slug=slug, name=name)


# A password given to member_add (addmember, the demo) is not a panel request: its audit rows
# carry no method, path or address.
MEMBER_ADD_CONTEXT = PanelContext(user_email="", method="")


def member_add(
    *,
    organization: Organization,
    email: str,
    password: str | None,
    owner: bool = False,
    member_scopes: Iterable[str] = (),
) -> Membership:
    with transaction.atomic():
        user = User.objects.filter(email__iexact=email).first()
        if user is None:
            user = User.objects.create_user(email=email, password=password)
        elif password and not user.check_password(password):
            password_set(user=user, password=password, context=MEMBER_ADD_CONTEXT)
        before = Membership.objects.filter(user=user, organization=organization).first()
        membership, _ = Membership.objects.update_or_create(
            user=user,
            organization=organization,
            defaults={
                "role": Role.OWNER if owner else Role.MEMBER,
                "scopes": [] if owner else scope_catalogue.normalize(member_scopes),
            },
        )
        if before is not None and before.held_scopes - membership.held_scopes:
            _withdraw_membership(membership, "member scopes narrowed")
    return membership


def membership_save(*, membership: Membership) -> None:
    """Save a membership (staff, in the admin); a scope taken away withdraws the person's
    open console sockets on the organization's servers."""
    with transaction.atomic():
        before = Membership.objects.filter(pk=membership.pk).first() if membership.pk else None
        membership.save()
        narrowed = before is not None and before.held_scopes - membership.held_scopes
        moved = before is not None and before.organization_id != membership.organization_id
        if moved and before is not None:
            _withdraw_membership(before, "membership removed")
        elif narrowed:
            _withdraw_membership(membership, "member scopes narrowed")


def member_remove(*, membership: Membership) -> None:
    """The person leaves the organization: their open console sockets on its servers end."""
    with transaction.atomic():
        _withdraw_membership(membership, "membership removed")
        membership.delete()


def _withdraw_membership(membership: Membership, reason: str) -> None:
    """Inside the write's transaction: the person's access to the organization's servers."""
    servers = server_list_for_organization(membership.organization_id)
    server_ids = list(servers.values_list("id", flat=True))
    if server_ids:  # none named would mean every server of the person's
        withdraw_access(reason=reason, server_ids=server_ids, person_ids=[membership.user_id])


def _validate_expiry(days: int | None) -> None:
    if days is not None and not 1 <= days <= MAX_EXPIRY_DAYS:
        raise KeyRequestRefused(
            f"Expiry must be 1 to {MAX_EXPIRY_DAYS} days, or none.", "expiry_days"
        )


def _clean_networks(allowed_ips: Iterable[str]) -> list[str]:
    networks = []
    for entry in allowed_ips:
        try:
            networks.append(str(ipaddress.ip_network(entry.strip(), strict=False)))
        except ValueError:
            raise KeyRequestRefused(
                f"{entry!r} is not an IP address or CIDR range.", "allowed_ips"
            ) from None
    return list(dict.fromkeys(networks))


def _scopes_not_held(membership: Membership, scopes: Iterable[str]) -> list[str]:
    """Recognised scopes the person lacks (unrecognised strings grant nothing: not counted)."""
    return [s for s in scope_catalogue.recognized(scopes) if s not in membership.held_scopes]


def _check_grantable(membership: Membership, requested: list[str]) -> None:
    beyond = _scopes_not_held(membership, requested)
    if beyond:
        raise ScopeExceedsPermissions(beyond)


def _check_acting_in(membership: Membership, key: ApiKey) -> None:
    if membership.organization_id != key.organization_id:
        raise KeyNotFound()


def api_key_check_rotatable(*, membership: Membership, key: ApiKey) -> None:
    """Rotation mints a key with the same scopes, so it is creation: the person must hold them.

    Raises ScopeExceedsPermissions (naming the scopes) when they do not.
    """
    _check_acting_in(membership, key)
    _check_grantable(membership, key.scopes)


def api_key_check_deletable(*, membership: Membership, key: ApiKey) -> None:
    """The creator may delete their key; anyone else must hold every recognised scope on it."""
    _check_acting_in(membership, key)
    if key.created_by_id is not None and key.created_by_id == membership.user_id:
        return
    lacking = _scopes_not_held(membership, key.scopes)
    if lacking:
        raise KeyDeletionRefused(lacking)


def _check_servers(organization: Organization, server_ids: list[str]) -> None:
    unknown = set(server_ids) - server_ids_in_organization(organization.id, server_ids)
    if unknown:
        raise KeyRequestRefused("Unknown servers: " + ", ".join(sorted(unknown)), "servers")


def _unused_key_id() -> str:
    """A fresh key id (a colliding id, about 1 in 2^47, is redrawn)."""
    for _ in range(5):
        key_id = keys.new_key_id()
        if not ApiKey.objects.filter(key_id=key_id).exists():
            return key_id
    raise KeyIdsExhausted()


def _mint(*, key_id: str | None = None, **fields: object) -> NewKey:
    """Insert a key with a fresh secret, under `key_id` (drawn beforehand) or a fresh id."""
    key_id = key_id or _unused_key_id()
    full_key = keys.new_key_string(key_id)
    secret = keys.parse_key(full_key)
    assert secret is not None
    key = ApiKey.objects.create(key_id=key_id, secret_hash=hash_key_secret(secret.secret), **fields)
    _forget_in_this_process(key_id)  # an id probed before it existed is remembered as unknown
    return NewKey(key=key, full_key=full_key)


def _name_taken(organization: Organization, name: str) -> bool:
    return ApiKey.objects.filter(
        organization=organization, name=name, revoked_at__isnull=True, replaced_by__isnull=True
    ).exists()


def api_key_create(
    *,
    membership: Membership,
    name: str,
    description: str = "",
    expiry_days: int | None = DEFAULT_EXPIRY_DAYS,
    scopes: Iterable[str] = (),
    server_ids: Iterable[str] = (),
    allowed_ips: Iterable[str] = (),
    actor: Actor,
) -> NewKey:
    """A new key of the membership's organization; the creator grants only scopes they hold."""
    organization = membership.organization
    requested = scope_catalogue.normalize(scopes)
    servers = list(dict.fromkeys(server_ids))
    name = name.strip()
    if not name:
        raise KeyRequestRefused("A key needs a name.", "name")
    _validate_expiry(expiry_days)
    _check_grantable(membership, requested)
    _check_servers(organization, servers)
    networks = _clean_networks(allowed_ips)
    now = timezone.now()
    with transaction.atomic():
        if _name_taken(organization, name):
            raise KeyRequestRefused("A key with this name already exists.", "name") from None
        try:
            with transaction.atomic():
                new = _mint(
                    organization=organization,
                    name=name,
                    description=description,
                    scopes=requested,
                    server_restrictions=servers,
                    allowed_ips=networks,
                    expires_at=now + timedelta(days=expiry_days) if expiry_days else None,
                    created_at=now,
                    created_by=membership.user,
                )
        except IntegrityError:
            raise KeyRequestRefused("A key with this name already exists.", "name") from None
        actor.audit(organization_id=organization.id, action=PanelAction.KEY_CREATE)
    return new


def api_key_rotate(
    *,
    key: ApiKey,
    membership: Membership,
    grace_hours: int = DEFAULT_GRACE_HOURS,
    actor: Actor,
) -> NewKey:
    """A successor with a new id and secret; the old key works `grace_hours` more at most.

    The person rotating must hold every recognised scope on the key (ScopeExceedsPermissions).
    """
    if not 0 <= grace_hours <= MAX_GRACE_HOURS:
        raise KeyRequestRefused(f"Grace must be 0 to {MAX_GRACE_HOURS} hours.", "grace_hours")
    now = timezone.now()
    with transaction.atomic():
        old = ApiKey.objects.select_for_update().get(pk=key.pk)
        original_expiry = old.expires_at
        api_key_check_rotatable(membership=membership, key=old)
        if old.status_at(now) != KeyStatus.ACTIVE or old.replaced_by is not None:
            raise KeyNotRotatable()
        grace_end = now + timedelta(hours=grace_hours)
        old.expires_at = min(old.expires_at, grace_end) if old.expires_at else grace_end
        # The successor's id is drawn first: naming it on the old key frees the name for it.
        old.replaced_by, old.rotated_at = _unused_key_id(), now
        old.save(update_fields=["expires_at", "replaced_by", "rotated_at"])
        new = _mint(
            key_id=old.replaced_by,
            organization_id=old.organization_id,
            name=old.name,
            description=old.description,
            scopes=old.scopes,
            server_restrictions=old.server_restrictions,
            allowed_ips=old.allowed_ips,
            expires_at=original_expiry,
            created_at=now,
            # The person who rotated is the successor's creator (the contract carries the rest).
            created_by=membership.user,
        )
        actor.audit(organization_id=old.organization_id, action=PanelAction.KEY_ROTATE)
        if grace_hours == 0:  # the old key is expired at once: so are its open sockets
            withdraw_access(reason="key rotated", key_ids=[old.key_id])
    _forget_in_this_process(old.key_id)
    return new


def api_key_revoke(*, key: ApiKey, actor: Actor) -> ApiKey:
    """Permanent. This process refuses the key at once, every other within the cache bound."""
    _revoke(key, actor, PanelAction.KEY_REVOKE, ApiKey.objects.filter(revoked_at__isnull=True))
    key.refresh_from_db()
    return key


def api_key_revoke_own(*, caller: KeyRecord, key_id: str, actor: Actor) -> ApiKey:
    """A key revoking itself through the API: any other key id is refused alike, existing or
    not (SelfRevocationOnly), so the answer tells nothing about other keys."""
    if key_id != caller.key_id:
        raise SelfRevocationOnly(required_scope=Scope.KEYS_REVOKE)
    return api_key_revoke(key=api_key_get(caller.organization_id, caller.key_id), actor=actor)


def api_key_revoke_leaked(*, key: ApiKey, source: LeakSource, url: str, actor: Actor) -> bool:
    """Revoke a key found in public, if it is still active (a rotated-out key in its grace
    period is); expired and revoked keys are left as they are. The same revocation as
    `api_key_revoke`, marked with the reason and where it was found. True if it revoked."""
    now = timezone.now()
    active = ApiKey.objects.filter(revoked_at__isnull=True).exclude(expires_at__lte=now)
    return _revoke(
        key,
        actor,
        PanelAction.KEY_LEAK_REVOKED,
        active,
        revoked_reason=RevocationReason.LEAKED,
        leak_source=source,
        leak_url=url,
    )


def _revoke(
    key: ApiKey, actor: Actor, action: PanelAction, revocable: QuerySet[ApiKey], **marks: str
) -> bool:
    """Revoke by compare-and-set among `revocable` keys; audit only if this call revoked."""
    with transaction.atomic():
        changed = revocable.filter(pk=key.pk).update(revoked_at=timezone.now(), **marks)
        if changed:
            actor.audit(organization_id=key.organization_id, action=action, key_id=key.key_id)
            withdraw_access(reason="key revoked", key_ids=[key.key_id])
    _forget_in_this_process(key.key_id)
    return bool(changed)


def api_key_delete(*, key: ApiKey, membership: Membership, actor: Actor) -> ApiKey:
    """A person deleting (revoking) a key, under the deletion rule (KeyDeletionRefused)."""
    api_key_check_deletable(membership=membership, key=key)
    return api_key_revoke(key=key, actor=actor)


def _forget_in_this_process(key_id: str) -> None:
    """Drop the key's cached record here, now and after commit; other processes' copies
    expire within API_KEY_CACHE_SECONDS (at most 60 s)."""
    key_records.forget(key_id)
    transaction.on_commit(lambda: key_records.forget(key_id))


def email_owners(organization_id: str, subject: str, body: str) -> bool:
    """One email to the organization's owners (failure notices, leaked keys). Never raises:
    False when the mail server refused it, True when it was sent or there is nobody to tell."""
    recipients = owner_emails(organization_id)
    if not recipients:
        return True
    try:
        send_mail(subject, body, None, recipients)
    except Exception:
        logger.exception("Could not email the owners of %s", organization_id)
        return False
    return True


def ssh_key_note_used(*, ssh_key_id: int) -> None:
    """An SFTP login proved the key: Account -> SSH keys shows when it was last used."""
    SshKey.objects.filter(id=ssh_key_id).update(last_used_at=timezone.now())
