"""One-time links for a customer's owner: set a first password (24 h) or sign in (60 s).

Only the token's SHA-256 is stored; a link is used by a compare-and-set on `used_at`, so two
clicks at once sign in (or set a password) once.
"""

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from accounts.models import Organization, User
from application.models import LinkPurpose, OwnerLink

LIFETIMES = {
    LinkPurpose.SET_PASSWORD: timedelta(hours=24),
    LinkPurpose.SIGN_IN: timedelta(seconds=60),
}
PATHS = {
    LinkPurpose.SET_PASSWORD: "/accounts/login/set-password/{}/",
    LinkPurpose.SIGN_IN: "/accounts/login/link/{}/",
}


@dataclass(frozen=True)
class NewLink:
    url: str = field(repr=False)  # the token is in it: never logged
    expires_at: datetime


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def owner_link_create(*, user: User, organization: Organization, purpose: LinkPurpose) -> NewLink:
    token = secrets.token_urlsafe(32)
    now = timezone.now()
    link = OwnerLink.objects.create(
        token_hash=_hash(token),
        purpose=purpose,
        user=user,
        organization=organization,
        created_at=now,
        expires_at=now + LIFETIMES[purpose],
    )
    base = settings.PUBLIC_BASE_URL.rstrip("/")
    return NewLink(url=base + PATHS[purpose].format(token), expires_at=link.expires_at)


def owner_link_valid(*, token: str, purpose: LinkPurpose) -> OwnerLink | None:
    """The unused, unexpired link of this token, without using it (a form to show)."""
    return (
        OwnerLink.objects.select_related("user")
        .filter(
            token_hash=_hash(token),
            purpose=purpose,
            used_at__isnull=True,
            expires_at__gt=timezone.now(),
        )
        .first()
    )


def owner_link_use(*, token: str, purpose: LinkPurpose) -> OwnerLink | None:
    """Use the link: its row when this call was the one that used it, else None (unknown,
    used before, or expired)."""
    now = timezone.now()
    used = OwnerLink.objects.filter(
        token_hash=_hash(token), purpose=purpose, used_at__isnull=True, expires_at__gt=now
    ).update(used_at=now)
    if used != 1:
        return None
    return OwnerLink.objects.select_related("user").get(token_hash=_hash(token))
