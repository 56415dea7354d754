"""Bearer API key authentication, the default for every public route.

Order of checks: token -> key state -> IP allowlist -> rate limit. Scopes come
next, in `accounts.permissions`.
"""

from datetime import datetime
from functools import cache
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from accounts import key_records, keys
from accounts.key_records import KeyRecord
from accounts.models import KeyStatus
from accounts.usage import note_key_used
from gshost import process_state
from gshost.api import rate_limits
from gshost.api.client_ip import client_ip
from gshost.api.errors import WWW_AUTHENTICATE, ApiError, ErrorCode, rate_limited

RATE_TIER_REALTIME = "realtime"
_UNKNOWN_KEY_HASH = "0" * 64  # no secret hashes to it; compared against for unknown key ids


def _pepper() -> bytes:
    return _derive_pepper(settings.API_KEY_PEPPER, settings.SECRET_KEY)


@cache
def _derive_pepper(configured: str, secret_key: str) -> bytes:
    return (configured or f"gshost-api-key-pepper:{secret_key}").encode()


process_state.register(
    "accounts.authentication",
    bound="the pepper of each (API_KEY_PEPPER, SECRET_KEY) pair in use: one",
    reset=_derive_pepper.cache_clear,
)


def hash_key_secret(secret: str) -> str:
    return keys.hash_secret(secret, _pepper())


def _bearer_token(request: HttpRequest) -> str:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, ErrorCode.MISSING_TOKEN)
    return token.strip()


def _invalid_token(request: HttpRequest) -> ApiError:
    """401 invalid_token, or 429 once this address has failed too often this minute."""
    limit = rate_limits.parse_rate(settings.AUTH_FAILURE_RATE)
    state = rate_limits.hit(f"authfail:{client_ip(request)}", limit)
    request.rate_limit_state = state  # type: ignore[attr-defined]
    if state.exceeded:
        return rate_limited(state.retry_after)
    return ApiError(401, ErrorCode.INVALID_TOKEN)


def verify_key(request: HttpRequest, token: str, now: datetime) -> KeyRecord:
    """The key behind `token`, refused with the contract's error when it cannot be used."""
    parsed = keys.parse_key(token)
    if parsed is None:  # typo or foreign string: no database read, attributed to no key
        raise _invalid_token(request)
    record = key_records.get_key_record(parsed.key_id, now)
    if record is None:
        # The same work as a wrong secret, so the answer's timing does not tell the id is unknown.
        keys.secret_matches(parsed.secret, _UNKNOWN_KEY_HASH, _pepper())
        raise _invalid_token(request)
    request.audit_key = record  # type: ignore[attr-defined]
    if not keys.secret_matches(parsed.secret, record.secret_hash, _pepper()):
        raise _invalid_token(request)
    status = record.status_at(now)
    if status == KeyStatus.REVOKED:
        raise ApiError(401, ErrorCode.TOKEN_REVOKED)
    if status == KeyStatus.EXPIRED:
        raise ApiError(401, ErrorCode.TOKEN_EXPIRED)
    return record


def _enforce_rate_limit(request: HttpRequest, record: KeyRecord, view: Any) -> None:
    realtime = getattr(view, "rate_tier", None) == RATE_TIER_REALTIME
    rate = settings.API_RATE_REALTIME if realtime else settings.API_RATE_DEFAULT
    match = request.resolver_match
    route = match.route if match is not None else request.path
    state = rate_limits.hit(f"key:{record.key_id}:{route}", rate_limits.parse_rate(rate))
    request.rate_limit_state = state  # type: ignore[attr-defined]
    if state.exceeded:
        raise rate_limited(state.retry_after)


class BearerKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[KeyRecord, KeyRecord]:
        django_request = request._request
        now = timezone.now()
        record = verify_key(django_request, _bearer_token(django_request), now)
        # Secret and state verified: from here on every answer, refusals included, may tell the
        # holder about the key (Deprecation and Sunset while it is rotated out).
        django_request.api_key_record = record  # type: ignore[attr-defined]
        ip = client_ip(django_request)
        if not record.allows_ip(ip):
            raise ApiError(403, ErrorCode.IP_NOT_ALLOWED, "This key may not be used from here.")
        view = (request.parser_context or {}).get("view")
        _enforce_rate_limit(django_request, record, view)
        note_key_used(record, ip, now)
        return record, record

    def authenticate_header(self, request: Request) -> str:
        return WWW_AUTHENTICATE


def calling_key(request: Request) -> KeyRecord:
    """The key that authenticated this request (the view runs only after authentication)."""
    key = request.auth
    if not isinstance(key, KeyRecord):
        raise ApiError(401, ErrorCode.MISSING_TOKEN)
    return key
