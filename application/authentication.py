"""Integration keys on the Application API: `Authorization: Bearer gsi_…`.

The same rules as the Customer API's keys (accounts.authentication), in the same order:
token (a typo, a foreign string or a `gsk_` key is refused by its shape and checksum with no
database read) -> key state -> IP allowlist -> rate limit (API_RATE_APPLICATION per key and
route) -> scope. The key's row is read on every call, so a revoked key is refused at once.
"""

import hmac
import ipaddress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.http import HttpRequest
from django.utils import timezone
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from accounts import keys
from accounts.authentication import hash_key_secret
from accounts.permissions import insufficient_scope
from application.models import IntegrationKey
from gshost.api import rate_limits
from gshost.api.client_ip import client_ip
from gshost.api.errors import WWW_AUTHENTICATE, ApiError, ErrorCode, rate_limited

PREFIX = "gsi_"
USE_COALESCE = timedelta(minutes=1)
_UNKNOWN_KEY_HASH = "0" * 64  # no secret hashes to it; compared against for unknown key ids


@dataclass(frozen=True)
class IntegrationRecord:
    """The calling integration key, as the request path sees it."""

    pk: int
    key_id: str
    name: str
    scopes: frozenset[str]
    allowed_ips: tuple[str, ...]

    is_authenticated = True  # DRF treats the key as the request's principal

    def allows_ip(self, ip: str | None) -> bool:
        if not self.allowed_ips:
            return True
        if ip is None:
            return False
        address = ipaddress.ip_address(ip)
        return any(address in ipaddress.ip_network(n, strict=False) for n in self.allowed_ips)


def new_integration_key_string(key_id: str) -> str:
    return keys.new_key_string(key_id, PREFIX)


def parse_integration_key(token: str) -> keys.ParsedKey | None:
    return keys.parse_key(token, PREFIX)


def _bearer_token(request: HttpRequest) -> str:
    scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, ErrorCode.MISSING_TOKEN)
    return token.strip()


def _invalid_token(request: HttpRequest) -> ApiError:
    """401 invalid_token, or 429 once this address has failed too often this minute."""
    state = rate_limits.hit(
        f"authfail:{client_ip(request)}", rate_limits.parse_rate(settings.AUTH_FAILURE_RATE)
    )
    request.rate_limit_state = state  # type: ignore[attr-defined]
    if state.exceeded:
        return rate_limited(state.retry_after)
    return ApiError(401, ErrorCode.INVALID_TOKEN)


def verify_integration_key(request: HttpRequest, token: str) -> IntegrationKey:
    parsed = parse_integration_key(token)
    if parsed is None:  # a typo, a foreign string, a customer's gsk_ key: no database read
        raise _invalid_token(request)
    key = IntegrationKey.objects.filter(key_id=parsed.key_id).first()
    # An unknown id costs the same work as a wrong secret: the timing does not tell which.
    stored = key.secret_hash if key is not None else _UNKNOWN_KEY_HASH
    if key is not None:  # a call naming a known key is audited, refused or not
        request.audit_integration = record_of(key)  # type: ignore[attr-defined]
    matches = hmac.compare_digest(hash_key_secret(parsed.secret), stored)
    if key is None or not matches:
        raise _invalid_token(request)
    if key.revoked:
        raise ApiError(401, ErrorCode.TOKEN_REVOKED)
    return key


def record_of(key: IntegrationKey) -> IntegrationRecord:
    return IntegrationRecord(
        pk=key.pk,
        key_id=key.key_id,
        name=key.name,
        scopes=frozenset(key.scopes),
        allowed_ips=tuple(key.allowed_ips),
    )


def note_used(key: IntegrationKey, ip: str | None, now: datetime) -> None:
    """`last_used_at` at most once a minute, or at once from a new address."""
    last = key.last_used_at
    if last is not None and key.last_used_ip == ip and now - last < USE_COALESCE:
        return
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - USE_COALESCE)
    new_ip = ~Q(last_used_ip=ip) if ip is not None else Q(last_used_ip__isnull=False)
    IntegrationKey.objects.filter(pk=key.pk).filter(stale | new_ip).update(
        last_used_at=now, last_used_ip=ip
    )


def _enforce_rate_limit(request: HttpRequest, key: IntegrationKey) -> None:
    match = request.resolver_match
    route = match.route if match is not None else request.path
    limit = rate_limits.parse_rate(settings.API_RATE_APPLICATION)
    state = rate_limits.hit(f"integration:{key.key_id}:{route}", limit)
    request.rate_limit_state = state  # type: ignore[attr-defined]
    if state.exceeded:
        raise rate_limited(state.retry_after)


class IntegrationKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[IntegrationRecord, IntegrationRecord]:
        django_request = request._request
        key = verify_integration_key(django_request, _bearer_token(django_request))
        record = record_of(key)
        ip = client_ip(django_request)
        if not record.allows_ip(ip):
            raise ApiError(403, ErrorCode.IP_NOT_ALLOWED, "This key may not be used from here.")
        _enforce_rate_limit(django_request, key)
        note_used(key, ip, timezone.now())
        return record, record

    def authenticate_header(self, request: Request) -> str:
        return WWW_AUTHENTICATE


class HasIntegrationScope(BasePermission):
    """Each view declares the scope of each method in `scopes`; a method not declared is 405."""

    def has_permission(self, request: Request, view: Any) -> bool:
        key = request.auth
        if not isinstance(key, IntegrationRecord):
            return False  # authentication always runs first; this is a safety net
        scope = getattr(view, "scopes", {}).get(request.method or "")
        if scope is None:
            raise ApiError(405, ErrorCode.METHOD_NOT_ALLOWED, "Method not allowed.")
        if scope not in key.scopes:
            raise insufficient_scope(scope)
        return True


def calling_integration(request: Request) -> IntegrationRecord:
    key = request.auth
    if not isinstance(key, IntegrationRecord):
        raise ApiError(401, ErrorCode.MISSING_TOKEN)
    return key
