"""Identifiers: a type prefix and random base62 characters (`srv_4fQ...`)."""

import secrets
from datetime import UTC, datetime

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
RANDOM_PART_LENGTH = 20

# For bytes.translate: byte b becomes BASE62[b % 62]; bytes >= 248 are dropped first, and
# 248 = 4 * 62, so every character is equally likely.
_BASE62_OF_BYTE = bytes(ord(BASE62[b % 62]) for b in range(256))
_BIASED_BYTES = bytes(range(248, 256))
_BASE62_PAIRS = [high + low for high in BASE62 for low in BASE62]


def random_base62(length: int) -> str:
    """Uniform over base62: bytes >= 248 are dropped so `% 62` has no bias."""
    chars = b""
    while len(chars) < length:  # 1 byte in 32 is dropped: the margin makes one read the rule
        random_bytes = secrets.token_bytes(length + length // 16 + 8)
        chars += random_bytes.translate(_BASE62_OF_BYTE, _BIASED_BYTES)
    return chars[:length].decode("ascii")


def new_id(prefix: str) -> str:
    """`prefix_` followed by 20 random base62 characters (about 119 bits)."""
    return f"{prefix}_{random_base62(RANDOM_PART_LENGTH)}"


def new_ids(prefix: str, count: int) -> list[str]:
    """`count` ids like `new_id`'s, drawn together: cheaper than one by one."""
    chars = random_base62(count * RANDOM_PART_LENGTH)
    return [
        f"{prefix}_{chars[start : start + RANDOM_PART_LENGTH]}"
        for start in range(0, len(chars), RANDOM_PART_LENGTH)
    ]


def to_base62(number: int, width: int) -> str:
    pairs = []  # two digits a step; the leading pair may bring a 0 that is stripped
    while number:
        number, pair = divmod(number, len(_BASE62_PAIRS))
        pairs.append(_BASE62_PAIRS[pair])
    return "".join(reversed(pairs)).lstrip("0").rjust(width, "0")


def format_timestamp(moment: datetime | None) -> str | None:
    """ISO 8601 UTC with milliseconds and `Z`, the only timestamp shape the API speaks."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
