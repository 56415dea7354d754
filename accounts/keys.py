"""The API key string: `gsk_` + key id (8) + `_` + secret (43, the last 6 a CRC32 checksum).
Integration keys (`gsi_`, the Application API's) have the same shape under their own prefix.

Pure functions, no database: a typo or a foreign string is refused before any query, and
secret scanners can validate a leaked key offline with the same rule.
"""

import hashlib
import hmac
import re
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

from gshost import process_state
from gshost.ids import BASE62, random_base62, to_base62

PREFIX = "gsk_"
KEY_ID_LENGTH = 8
SECRET_LENGTH = 43
CHECKSUM_LENGTH = 6
KEY_LENGTH = len(PREFIX) + KEY_ID_LENGTH + 1 + SECRET_LENGTH  # 56


@lru_cache(maxsize=4)
def _key_shape(prefix: str) -> re.Pattern[str]:
    return re.compile(
        rf"{re.escape(prefix)}([{BASE62}]{{{KEY_ID_LENGTH}}})_([{BASE62}]{{{SECRET_LENGTH}}})"
    )


@dataclass(frozen=True)
class ParsedKey:
    key_id: str
    secret: str = field(repr=False)  # never in a log line, traceback or error report


def checksum(text: str) -> str:
    """CRC32 of the UTF-8 bytes, base62, most significant digit first, 6 characters."""
    return to_base62(zlib.crc32(text.encode()), CHECKSUM_LENGTH)


def new_key_id() -> str:
    return random_base62(KEY_ID_LENGTH)


def new_key_string(key_id: str, prefix: str = PREFIX) -> str:
    body = f"{prefix}{key_id}_{random_base62(SECRET_LENGTH - CHECKSUM_LENGTH)}"
    return body + checksum(body)


def parse_key(token: str, prefix: str = PREFIX) -> ParsedKey | None:
    """The key id and secret of a well-formed key of `prefix` with a valid checksum, else None
    (a key of another prefix too)."""
    match = _key_shape(prefix).fullmatch(token)
    if match is None:
        return None
    body, check = token[:-CHECKSUM_LENGTH], token[-CHECKSUM_LENGTH:]
    if not hmac.compare_digest(checksum(body), check):
        return None
    return ParsedKey(key_id=match.group(1), secret=match.group(2))


def hash_secret(secret: str, pepper: bytes) -> str:
    """HMAC-SHA256 of the secret with a server-side pepper: a stolen table alone is useless."""
    mac = _keyed_hmac(pepper).copy()
    mac.update(secret.encode())
    return mac.hexdigest()


@lru_cache(maxsize=8)
def _keyed_hmac(pepper: bytes) -> hmac.HMAC:
    """The HMAC with the pepper already mixed in; copying it is cheaper than keying anew."""
    return hmac.new(pepper, digestmod=hashlib.sha256)


process_state.register(
    "accounts.keys",
    bound="the keyed HMAC of at most 8 peppers (one is in use)",
    reset=_keyed_hmac.cache_clear,
)


def secret_matches(secret: str, stored_hash: str, pepper: bytes) -> bool:
    return hmac.compare_digest(hash_secret(secret, pepper), stored_hash)
