"""HMAC-SHA256 signing of webhook deliveries, and the reference verification for receivers.

Two signature schemes travel on every request:

The signature is the lower-case hex HMAC-SHA256 of ``<timestamp>.<raw body>``, keyed with the
whole signing-secret string (``whsec_...``) encoded as UTF-8. The timestamp is the exact
``X-Webhook-Timestamp`` header value (Unix seconds); binding it into the signature lets a
receiver reject replays older than its tolerance.

Beside it, the Standard Webhooks headers (``webhook-id``, ``webhook-timestamp``,
``webhook-signature``), so that receivers can verify with the official ``standardwebhooks``
libraries: ``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{raw body}">``, keyed with the same
UTF-8 bytes of the secret (libraries take them as raw bytes). While a rolled secret's grace
period runs, ``X-Webhook-Signature`` is still made with the previous secret and
``webhook-signature`` carries both signatures, the new one first.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Mapping

from gshost.errors import Misuse

SIGNATURE_HEADER = "X-Webhook-Signature"
TIMESTAMP_HEADER = "X-Webhook-Timestamp"
DEFAULT_TOLERANCE_SECONDS = 300
STANDARD_ID_HEADER = "webhook-id"
STANDARD_TIMESTAMP_HEADER = "webhook-timestamp"
STANDARD_SIGNATURE_HEADER = "webhook-signature"

# Bounds the integer parse of attacker-supplied input; 12 digits reach the year 33658.
_MAX_TIMESTAMP_DIGITS = 12


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """Return the hex signature of ``body`` sent with ``timestamp``.

    A string timestamp is signed exactly as given, so a verifier can sign the header value it
    received without re-rendering it.
    """
    if not secret:
        raise Misuse("signing secret must not be empty")
    message = str(timestamp).encode("ascii") + b"." + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def standard_signature(secret: str, message_id: str, timestamp: int | str, body: bytes) -> str:
    """One Standard Webhooks signature: ``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body``."""
    if not secret:
        raise Misuse("signing secret must not be empty")
    message = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret.encode("utf-8"), message, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature_headers(
    secret: str,
    body: bytes,
    *,
    now: int | None = None,
    message_id: str | None = None,
    previous_secret: str | None = None,
) -> dict[str, str]:
    """Return the timestamp and signature headers for one delivery attempt.

    With ``message_id``, the Standard Webhooks headers too. With ``previous_secret`` (a roll's
    grace period), ``X-Webhook-Signature`` is made with it, so receivers that have not changed
    keep verifying, and ``webhook-signature`` holds both signatures, the new secret's first.
    """
    timestamp = int(time.time()) if now is None else now
    headers = {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(previous_secret or secret, timestamp, body),
    }
    if message_id is not None:
        signing = [secret] if previous_secret is None else [secret, previous_secret]
        headers[STANDARD_ID_HEADER] = message_id
        headers[STANDARD_TIMESTAMP_HEADER] = str(timestamp)
        headers[STANDARD_SIGNATURE_HEADER] = " ".join(
            standard_signature(key, message_id, timestamp, body) for key in signing
        )
    return headers


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
