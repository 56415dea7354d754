"""Identifiers: a type prefix and random base62 characters (`srv_4fQ...`)."""

import secrets
from datetime import UTC, datetime

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
RANDOM_PART_LENGTH = 20


def random_base62(length: int) -> str:
    """Uniform over base62: bytes >= 248 are dropped so `% 62` has no bias."""
    chars: list[str] = []
    while len(chars) < length:
        chars.extend(BASE62[b % 62] for b in secrets.token_bytes(length + 8) if b < 248)
    return "".join(chars[:length])


def new_id(prefix: str) -> str:
    """`prefix_` followed by 20 random base62 characters (about 119 bits)."""
    return f"{prefix}_{random_base62(RANDOM_PART_LENGTH)}"


def to_base62(number: int, width: int) -> str:
    digits = []
    while number:
        number, remainder = divmod(number, 62)
        digits.append(BASE62[remainder])
    return "".join(reversed(digits)).rjust(width, "0")


def format_timestamp(moment: datetime | None) -> str | None:
    """ISO 8601 UTC with milliseconds and `Z`, the only timestamp shape the API speaks."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
