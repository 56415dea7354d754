"""Signing secrets: `whsec_` + 43 base62, shown once, stored encrypted with MultiFernet.

The encryption is `gshost.encryption` (keys from WEBHOOK_SECRET_KEYS, rotatable). A secret
that cannot be decrypted is "no usable signing secret": its deliveries fail at once, without
retries.

A rolled secret's predecessor is stored the same way (`encrypted_previous_secret`) and signs
beside it until `previous_secret_expires_at`.
"""

from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from gshost.encryption import decrypt_secret, encrypt_secret
from gshost.ids import random_base62

__all__ = ["decrypt_secret", "encrypt_secret", "new_signing_secret", "signing_keys"]

SECRET_PREFIX = "whsec_"
SECRET_RANDOM_LENGTH = 43


def new_signing_secret() -> str:
    return SECRET_PREFIX + random_base62(SECRET_RANDOM_LENGTH)


@dataclass(frozen=True)
class SigningKeys:
    """The secrets that sign one request: the current one, and during a roll's grace period
    the one it replaced."""

    current: str = field(repr=False)
    previous: str | None = field(default=None, repr=False)


def signing_keys(
    encrypted_secret: str,
    encrypted_previous_secret: str = "",
    previous_secret_expires_at: datetime | None = None,
    *,
    now: datetime | None = None,
) -> SigningKeys | None:
    """The usable keys, or None when the current secret cannot be decrypted.

    A previous secret past its grace, or one that cannot be decrypted, simply no longer signs.
    """
    current = decrypt_secret(encrypted_secret)
    if current is None:
        return None
    moment = now or timezone.now()
    in_grace = previous_secret_expires_at is not None and previous_secret_expires_at > moment
    previous = decrypt_secret(encrypted_previous_secret) if in_grace else None
    return SigningKeys(current=current, previous=previous)
