"""The scope catalogue. Any other string may be written on a key; it grants nothing."""

import difflib
from collections.abc import Iterable
from enum import StrEnum


class Scope(StrEnum):
    SERVERS_READ = "servers:read"
    SERVERS_POWER = "servers:power"
    SERVERS_WRITE = "servers:write"
    CONSOLE_WRITE = "console:write"
    SCHEDULES_READ = "schedules:read"
    SCHEDULES_EXECUTE = "schedules:execute"
    BACKUPS_READ = "backups:read"
    BACKUPS_CREATE = "backups:create"
    BACKUPS_RESTORE = "backups:restore"
    MAINTENANCE_EXECUTE = "maintenance:execute"
    KEYS_READ = "keys:read"
    KEYS_REVOKE = "keys:revoke"
    AUDIT_READ = "audit:read"
    WEBHOOKS_READ = "webhooks:read"
    WEBHOOKS_WRITE = "webhooks:write"
    WEBHOOKS_MANAGE = "webhooks:manage"
    FILES_READ = "files:read"
    FILES_WRITE = "files:write"
    FILES_DELETE = "files:delete"
    FILES_SFTP = "files:sftp"


CATALOGUE: frozenset[str] = frozenset(scope.value for scope in Scope)


def recognized(scopes: Iterable[str]) -> list[str]:
    return [scope for scope in scopes if scope in CATALOGUE]


def unrecognized(scopes: Iterable[str]) -> list[str]:
    return [scope for scope in scopes if scope not in CATALOGUE]


def closest_known(scope: str) -> str | None:
    """The catalogue scope a typo most likely meant (`sevrers:read` -> `servers:read`)."""
    matches = difflib.get_close_matches(scope.lower(), sorted(CATALOGUE), n=1, cutoff=0.6)
    return matches[0] if matches else None


def normalize(scopes: Iterable[str]) -> list[str]:
    """Stripped, de-duplicated, in the order given; empty strings dropped."""
    seen: dict[str, None] = {}
    for scope in scopes:
        cleaned = scope.strip()
        if cleaned:
            seen.setdefault(cleaned, None)
    return list(seen)
