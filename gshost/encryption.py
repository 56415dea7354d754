"""Secrets kept encrypted at rest (webhook signing secrets, node tokens) with one MultiFernet.

Encryption keys come from WEBHOOK_SECRET_KEYS (the first encrypts, all decrypt), so they can
be rotated; without it a key is derived from SECRET_KEY (the derivation's label keeps its
historic name, so what was stored before stays readable).
"""

import base64
import hashlib
from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

from gshost import process_state


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
    # Not cached: a decryption is cheap beside the network round trip it precedes.
    try:
        return _cipher().decrypt(token.encode()).decode()
    except (InvalidToken, ValueError):
        return None


process_state.register(
    "gshost.encryption",
    bound="the cipher of each (WEBHOOK_SECRET_KEYS, SECRET_KEY) pair in use: one",
    reset=_fernet.cache_clear,
)
