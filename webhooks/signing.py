"""HMAC-SHA256 signing of webhook deliveries, and the reference verification for receivers.

The signature is the lower-case hex HMAC-SHA256 of ``<timestamp>.<raw body>``, keyed with the
whole signing-secret string (``whsec_...``) encoded as UTF-8. The timestamp is the exact
``X-Webhook-Timestamp`` header value (Unix seconds); binding it into the signature lets a
receiver reject replays older than its tolerance.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

SIGNATURE_HEADER = "X-Webhook-Signature"
TIMESTAMP_HEADER = "X-Webhook-Timestamp"
DEFAULT_TOLERANCE_SECONDS = 300

# Bounds the integer parse of attacker-supplied input; 12 digits reach the year 33658.
_MAX_TIMESTAMP_DIGITS = 12


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """Return the hex signature of ``body`` sent with ``timestamp``.

    A string timestamp is signed exactly as given, so a verifier can sign the header value it
    received without re-rendering it.
    """
    if not secret:
        raise ValueError("signing secret must not be empty")
    message = str(timestamp).encode("ascii") + b"." + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def signature_headers(secret: str, body: bytes, *, now: int | None = None) -> dict[str, str]:
    """Return the timestamp and signature headers for one delivery attempt."""
    timestamp = int(time.time()) if now is None else now
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, timestamp, body),
    }


def verify_signature(
    secret: str,
    timestamp: str,
    signature: str,
    body: bytes,
    *,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: int | None = None,
) -> bool:
    """Check a signature and that its timestamp is within ``tolerance`` seconds of now."""
    if not (timestamp.isascii() and timestamp.isdigit()) or len(timestamp) > _MAX_TIMESTAMP_DIGITS:
        return False
    current = int(time.time()) if now is None else now
    if abs(current - int(timestamp)) > tolerance:
        return False
    expected = sign(secret, timestamp, body).encode("ascii")
    return hmac.compare_digest(expected, signature.encode("utf-8", errors="replace"))


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: int | None = None,
) -> bool:
    """Verify a received delivery from its headers (names matched case-insensitively)."""
    lowered = {name.lower(): value for name, value in headers.items()}
    timestamp = lowered.get(TIMESTAMP_HEADER.lower())
    signature = lowered.get(SIGNATURE_HEADER.lower())
    if timestamp is None or signature is None:
        return False
    return verify_signature(secret, timestamp, signature, body, tolerance=tolerance, now=now)
