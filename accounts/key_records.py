"""Snapshots of API keys for the request path, cached per process for a short while.

Every process keeps a key's snapshot at most API_KEY_CACHE_SECONDS (capped at 60 s, the
contract's revocation bound); the process that revokes or rotates drops it at once.
"""

import ipaddress
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache, cached_property
from typing import Any

from django.conf import settings
from django.utils import timezone

from accounts import scopes as scope_catalogue
from accounts.models import ApiKey, KeyStatus, key_status_at
from gshost import process_state
from gshost.ids import format_timestamp
from gshost.lru import LruDict

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_CACHE_SECONDS = 60


@dataclass(frozen=True)
class KeyRecord:
    pk: int
    key_id: str
    organization_id: str
    name: str
    description: str
    secret_hash: str
    scopes: tuple[str, ...]
    server_restrictions: frozenset[str]
    allowed_networks: tuple[IPNetwork, ...]
    expires_at: datetime | None
    revoked_at: datetime | None
    replaced_by: str | None
    rotated_at: datetime | None
    created_at: datetime
    created_by: str | None
    last_used_at: datetime | None
    last_used_ip: str | None
    fetched_at: datetime

    is_authenticated = True  # DRF treats the key as the request's principal

    @cached_property
    def granted_scopes(self) -> frozenset[str]:
        return frozenset(scope_catalogue.recognized(self.scopes))

    @cached_property
    def public_fields(self) -> dict[str, Any]:
        """The parts of the key's public record that only change with a new snapshot."""
        return {
            "id": self.key_id,
            "name": self.name,
            "description": self.description,
            "prefix": f"gsk_{self.key_id}",
            "scopes": list(self.scopes),
            "unrecognized_scopes": scope_catalogue.unrecognized(self.scopes),
            "server_restrictions": sorted(self.server_restrictions),
            "allowed_ips": [str(network) for network in self.allowed_networks],
            "expires_at": format_timestamp(self.expires_at),
            "created_at": format_timestamp(self.created_at),
            "created_by": self.created_by,
            "replaced_by": self.replaced_by,
            "revoked_at": format_timestamp(self.revoked_at),
        }

    def status_at(self, moment: datetime) -> KeyStatus:
        return key_status_at(moment, revoked_at=self.revoked_at, expires_at=self.expires_at)

    def allows_ip(self, ip: str | None) -> bool:
        if not self.allowed_networks:
            return True
        if ip is None:
            return False
        address = ipaddress.ip_address(ip)
        return any(address in network for network in self.allowed_networks)

    def allows_server(self, server_id: str) -> bool:
        return not self.server_restrictions or server_id in self.server_restrictions


def record_from_key(key: ApiKey) -> KeyRecord:
    return KeyRecord(
        pk=key.pk,
        key_id=key.key_id,
        organization_id=key.organization_id,
        name=key.name,
        description=key.description,
        secret_hash=key.secret_hash,
        scopes=tuple(key.scopes),
        server_restrictions=frozenset(key.server_restrictions),
        allowed_networks=tuple(ipaddress.ip_network(n, strict=False) for n in key.allowed_ips),
        expires_at=key.expires_at,
        revoked_at=key.revoked_at,
        replaced_by=key.replaced_by,
        rotated_at=key.rotated_at,
        created_at=key.created_at,
        created_by=key.created_by.email if key.created_by else None,
        last_used_at=key.last_used_at,
        last_used_ip=key.last_used_ip,
        fetched_at=timezone.now(),
    )


MAX_CACHED_KEYS = 10_000
MAX_MISSING = 10_000
_cache: LruDict[str, KeyRecord] = LruDict(MAX_CACHED_KEYS)
# Key ids found in no row, and when: an unknown id is answered from memory like a known one,
# so the time of an answer does not tell whether a key id exists.
_missing: LruDict[str, datetime] = LruDict(MAX_MISSING)


@cache
def _ttl(seconds: float) -> timedelta:
    return timedelta(seconds=min(seconds, MAX_CACHE_SECONDS))


def get_key_record(key_id: str, now: datetime) -> KeyRecord | None:
    """The key's snapshot, from this process's cache while fresh, else from the database."""
    ttl = _ttl(settings.API_KEY_CACHE_SECONDS)
    cached = _cache.get(key_id)
    if cached is not None and now - cached.fetched_at < ttl:
        return cached
    missing_since = _missing.get(key_id)
    if missing_since is not None and now - missing_since < ttl:
        return None
    key = ApiKey.objects.select_related("created_by").filter(key_id=key_id).first()
    if key is None:
        _missing.put(key_id, now)
        return None
    record = record_from_key(key)
    _cache.put(key_id, record)
    return record


def forget(*key_ids: str) -> None:
    for key_id in key_ids:
        _cache.pop(key_id)
        _missing.pop(key_id)


def forget_all() -> None:
    _cache.clear()
    _missing.clear()
    _ttl.cache_clear()


process_state.register(
    "accounts.key_records",
    bound=f"at most {MAX_CACHED_KEYS:,} key records and {MAX_MISSING:,} unknown key ids, "
    "least recently used dropped; each trusted for API_KEY_CACHE_SECONDS (at most 60 s)",
    reset=forget_all,
)
