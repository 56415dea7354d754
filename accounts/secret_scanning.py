"""GitHub secret-scanning alerts: checking that an alert really comes from GitHub.

GitHub signs each alert's raw body with ECDSA P-256 / SHA-256 and names the key it used
(`Github-Public-Key-Identifier`); the signature (`Github-Public-Key-Signature`) is base64 DER.
Its public keys are published as `{"public_keys": [{"key_identifier", "key" (PEM),
"is_current"}]}` at SECRET_SCANNING_KEYS_URL. The document is kept in the cache for 30
minutes; an identifier it does not hold makes us fetch it once more (GitHub may have added a
key), at most once per REFETCH_COOLDOWN_SECONDS so that made-up identifiers cannot make us
hammer GitHub (whose unauthenticated API allows 60 requests an hour). A fetch that failed is
remembered for FAILURE_SECONDS: alerts meanwhile get 503 without a new fetch. One fetch runs
at a time (a lock in the process, a mark in the cache across processes): the others wait for
its outcome instead of fetching too.
"""

import base64
import binascii
import json
import logging
import threading
import time
from typing import Any

import requests
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from django.conf import settings
from django.core.cache import cache

from accounts.errors import KeysUnavailable, SignatureRefused
from gshost import process_state

logger = logging.getLogger(__name__)

CACHE_KEY = "secret-scanning:github-public-keys"
REFETCH_MARK = "secret-scanning:github-public-keys:refetched"
FAILURE_MARK = "secret-scanning:github-public-keys:failed"
FETCHING_MARK = "secret-scanning:github-public-keys:fetching"
FAILURE_SECONDS = 60
CACHE_SECONDS = 30 * 60
REFETCH_COOLDOWN_SECONDS = 5 * 60
FETCH_TIMEOUT_SECONDS = (5.0, 10.0)  # connect, and each read
FETCH_DEADLINE_SECONDS = 15.0  # the whole document
MAX_DOCUMENT_BYTES = 1024 * 1024

PublicKeys = dict[str, str]  # key identifier -> PEM


def verify_alert(body: bytes, key_identifier: str, signature: str) -> None:
    """Return if `signature` is GitHub's over `body`; SignatureRefused or KeysUnavailable."""
    if not key_identifier or not signature:
        raise SignatureRefused("missing signature headers")
    try:
        der = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureRefused("signature is not base64") from None
    pem = _public_key_pem(key_identifier)
    if pem is None:
        raise SignatureRefused("unknown key identifier")
    try:
        public_key = load_pem_public_key(pem.encode())
    except (ValueError, TypeError, UnicodeError):
        raise KeysUnavailable(f"public key {key_identifier!r} cannot be read") from None
    if not isinstance(public_key, ec.EllipticCurvePublicKey) or not isinstance(
        public_key.curve, ec.SECP256R1
    ):
        raise KeysUnavailable(f"public key {key_identifier!r} is not an ECDSA P-256 key")
    try:
        public_key.verify(der, body, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise SignatureRefused("signature does not verify") from None


def _public_key_pem(key_identifier: str) -> str | None:
    known = _cached()
    fetched_now = known is None
    if known is None:
        known = _fetch_and_keep()
    if key_identifier not in known and not fetched_now and _may_refetch():
        known = _fetch_and_keep()
    return known.get(key_identifier)


def _cached() -> PublicKeys | None:
    try:
        value = cache.get(CACHE_KEY)
    except Exception:  # a cache outage costs a fetch, not the alert
        logger.warning("Cache unavailable; fetching GitHub's public keys", exc_info=True)
        return None
    return value if isinstance(value, dict) else None


def _may_refetch() -> bool:
    try:
        return bool(cache.add(REFETCH_MARK, True, REFETCH_COOLDOWN_SECONDS))
    except Exception:
        return True


_fetching = threading.Lock()
_fetches = 0  # fetches this process made (a thread that waited sees whether one happened)


def _forget_fetches() -> None:
    global _fetches
    _fetches = 0


process_state.register(
    "accounts.secret_scanning",
    bound="a count of this process's key fetches, and the lock that makes them one at a time",
    reset=_forget_fetches,
)


def _fetch_and_keep() -> PublicKeys:
    """The keys fetched now; KeysUnavailable without a fetch while a failed one is remembered.
    A caller that waited for another's fetch takes its outcome."""
    global _fetches
    if _cache_get(FAILURE_MARK):
        raise KeysUnavailable("the public keys could not be fetched a moment ago")
    seen = _fetches
    with _fetching:
        waited = _fetches != seen  # another thread fetched meanwhile
        began = time.monotonic()
        while not _cache_add(FETCHING_MARK, True, FETCH_DEADLINE_SECONDS + 5):
            waited = True  # another process fetches: its outcome will be in the cache
            time.sleep(0.1)
            if time.monotonic() - began > FETCH_DEADLINE_SECONDS + 5:
                break
        try:
            if waited:
                if _cache_get(FAILURE_MARK):
                    raise KeysUnavailable("the public keys could not be fetched a moment ago")
                if (known := _cached()) is not None:
                    return known
            return _fetch_once()
        finally:
            _fetches += 1
            _cache_delete(FETCHING_MARK)


def _fetch_once() -> PublicKeys:
    try:
        known = fetch_public_keys(settings.SECRET_SCANNING_KEYS_URL)
    except KeysUnavailable:
        _cache_set(FAILURE_MARK, True, FAILURE_SECONDS)
        raise
    _cache_set(CACHE_KEY, known, CACHE_SECONDS)
    return known


def _cache_get(key: str) -> Any:
    try:
        return cache.get(key)
    except Exception:
        return None


def _cache_add(key: str, value: Any, seconds: float) -> bool:
    try:
        return bool(cache.add(key, value, seconds))
    except Exception:  # no cache: this process's lock is all there is
        return True


def _cache_set(key: str, value: Any, seconds: float) -> None:
    try:
        cache.set(key, value, seconds)
    except Exception:
        logger.warning("Could not write %s to the cache", key, exc_info=True)


def _cache_delete(key: str) -> None:
    try:
        cache.delete(key)
    except Exception:
        logger.warning("Could not remove %s from the cache", key, exc_info=True)


def fetch_public_keys(url: str) -> PublicKeys:
    """The published keys by identifier; KeysUnavailable when they cannot be had."""
    session = requests.Session()
    session.trust_env = False  # no proxy or .netrc from the environment
    try:
        with session.get(
            url,
            timeout=FETCH_TIMEOUT_SECONDS,
            stream=True,
            headers={"Accept": "application/json", "User-Agent": "gshost-secret-scanning"},
        ) as response:
            response.raise_for_status()
            raw = _read_bounded(response)
    except (requests.RequestException, OSError) as error:
        logger.warning("Could not fetch GitHub's public keys from %s: %s", url, error)
        raise KeysUnavailable("public keys unreachable") from None
    finally:
        session.close()
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise KeysUnavailable("public keys document too large")
    try:
        return parse_public_keys(json.loads(raw))
    except (ValueError, UnicodeError, KeysUnavailable):
        logger.warning("The public keys document at %s is not what GitHub publishes", url)
        raise KeysUnavailable("public keys document unreadable") from None


def _read_bounded(response: requests.Response) -> bytes:
    """The body, stopping one chunk past MAX_DOCUMENT_BYTES or at FETCH_DEADLINE_SECONDS."""
    deadline = time.monotonic() + FETCH_DEADLINE_SECONDS
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_content(64 * 1024):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_DOCUMENT_BYTES:
            break
        if time.monotonic() > deadline:
            raise requests.Timeout("the public keys took too long to arrive")
    return b"".join(chunks)


def parse_public_keys(document: Any) -> PublicKeys:
    """`{"public_keys": [{"key_identifier", "key", ...}]}` -> {identifier: PEM}."""
    entries = document.get("public_keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise KeysUnavailable("public keys document has no public_keys list")
    known: PublicKeys = {}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        identifier, pem = entry.get("key_identifier"), entry.get("key")
        if isinstance(identifier, str) and isinstance(pem, str):
            known[identifier] = pem
    return known
