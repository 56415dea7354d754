"""What the key pages show about a key, worked out once so the templates stay simple."""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from accounts import scopes as scope_catalogue
from accounts.models import ApiKey, KeyStatus, RevocationReason


@dataclass(frozen=True)
class ScopeTag:
    scope: str
    recognized: bool
    suggestion: str | None = None


@dataclass(frozen=True)
class ServerTag:
    id: str
    name: str | None  # None: the server no longer exists


@dataclass(frozen=True)
class KeyRow:
    key: ApiKey
    status: KeyStatus
    scopes: list[ScopeTag]
    servers: list[ServerTag]

    @property
    def can_rotate(self) -> bool:
        return self.status == KeyStatus.ACTIVE and self.key.replaced_by is None

    @property
    def can_revoke(self) -> bool:
        return self.status == KeyStatus.ACTIVE

    @property
    def leaked(self) -> bool:
        """Revoked by the platform because the key was found in public."""
        return self.key.revoked_reason == RevocationReason.LEAKED


def scope_tags(scopes: Iterable[str]) -> list[ScopeTag]:
    return [
        ScopeTag(scope, True)
        if scope in scope_catalogue.CATALOGUE
        else ScopeTag(scope, False, scope_catalogue.closest_known(scope))
        for scope in scopes
    ]


def unrecognized_tags(scopes: Iterable[str]) -> list[ScopeTag]:
    """The unrecognized scopes, each with the known scope it probably meant."""
    return [tag for tag in scope_tags(scopes) if not tag.recognized]


def key_rows(keys: Iterable[ApiKey], server_names: dict[str, str], now: datetime) -> list[KeyRow]:
    return [
        KeyRow(
            key=key,
            status=key.status_at(now),
            scopes=scope_tags(key.scopes),
            servers=[ServerTag(sid, server_names.get(sid)) for sid in key.server_restrictions],
        )
        for key in keys
    ]
