"""Signing secrets: `whsec_` + 43 base62, shown once, stored encrypted with MultiFernet.

Encryption keys come from WEBHOOK_SECRET_KEYS (the first encrypts, all decrypt), so they can
be rotated; without it a key is derived from SECRET_KEY. A secret that cannot be decrypted is
"no usable signing secret": its deliveries fail at once, without retries.

A rolled secret's predecessor is stored the same way (`encrypted_previous_secret`) and signs
beside it until `previous_secret_expires_at`.
"""

import base64
import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.utils import timezone

from gshost.ids import random_base62

SECRET_PREFIX = "whsec_"
SECRET_RANDOM_LENGTH = 43


def new_signing_secret() -> str:
    return SECRET_PREFIX + random_base62(SECRET_RANDOM_LENGTH)


@cache
def _fernet(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    if not keys:
        derived = hashlib.sha256(f"gshost-webhook-secrets:{secret_key}".encode()).digest()
        keys = (base64.urlsafe_b64encode(derived).decode(),)
    return MultiFernet([Fernet(key.encode()) for key in keys])


def _cipher() -> MultiFernet:
    return _fernet(
        tuple(k.strip() for k in settings.WEBHOOK_SECRET_KEYS if k.strip()), settings.SECRET_KEY
    )


def encrypt_secret(secret: str) -> str:
    return _cipher().encrypt(secret.encode()).decode()


def decrypt_secret(token: str) -> str | None:
    """The secret, or None when no configured key can decrypt it."""
    # Not cached: about 6 µs a decryption, nothing beside the network round trip of an attempt.
    try:
        return _cipher().decrypt(token.encode()).decode()
    except (InvalidToken, ValueError):
        return None


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
