"""What a server can do: its game decides what is supported (else 501 not_supported), its
plan what is enabled (else 403 feature_not_enabled), and the key what is granted (else 403
insufficient_scope). GET /servers/{id}/capabilities tells all three."""

from collections.abc import Iterable
from enum import StrEnum

from accounts.scopes import Scope
from gshost_agent.templates import load_template
from servers.errors import CapabilityNotSupported, FeatureNotEnabled
from servers.models import TEMPLATE_GAMES, Game, Server


class Capability(StrEnum):
    PLAYERS = "players"
    CONSOLE = "console"
    POWER = "power"
    BACKUPS = "backups"
    RESTORE = "restore"
    MAINTENANCE = "maintenance"
    METRICS = "metrics"
    SETTINGS = "settings"
    SCHEDULES = "schedules"
    MIGRATION = "migration"
    CONFIG_EVENTS = "config_events"


# The scope a key needs to use the capability's main route.
REQUIRED_SCOPE: dict[Capability, Scope] = {
    Capability.PLAYERS: Scope.SERVERS_READ,
    Capability.CONSOLE: Scope.CONSOLE_WRITE,
    Capability.POWER: Scope.SERVERS_POWER,
    Capability.BACKUPS: Scope.BACKUPS_CREATE,
    Capability.RESTORE: Scope.BACKUPS_RESTORE,
    Capability.MAINTENANCE: Scope.MAINTENANCE_EXECUTE,
    Capability.METRICS: Scope.SERVERS_READ,
    Capability.SETTINGS: Scope.SERVERS_READ,
    Capability.SCHEDULES: Scope.SCHEDULES_EXECUTE,
    Capability.MIGRATION: Scope.SERVERS_READ,
    Capability.CONFIG_EVENTS: Scope.SERVERS_READ,
}

UNSUPPORTED: dict[str, frozenset[Capability]] = {
    Game.MINECRAFT: frozenset(),
    Game.CUSTOM: frozenset({Capability.PLAYERS}),  # a custom game has no player protocol
}


def is_supported(server: Server, capability: Capability) -> bool:
    """A template game (agent nodes) supports what its template lists; the simulated games
    everything but what UNSUPPORTED names."""
    if server.game in TEMPLATE_GAMES:
        return capability.value in load_template(server.game).capabilities
    return capability not in UNSUPPORTED.get(server.game, frozenset())


def is_enabled(server: Server, capability: Capability) -> bool:
    return capability.value not in (server.disabled_capabilities or [])


def capability_require(server: Server, capability: Capability) -> None:
    """Refuse with 501 when the game cannot do it, 403 when the plan does not allow it."""
    if not is_supported(server, capability):
        raise CapabilityNotSupported(capability.value)
    if not is_enabled(server, capability):
        raise FeatureNotEnabled(capability.value)


def capabilities_of(server: Server, granted_scopes: Iterable[str]) -> dict[str, dict[str, object]]:
    granted = frozenset(granted_scopes)
    return {
        capability.value: {
            "supported": is_supported(server, capability),
            "enabled": is_enabled(server, capability),
            "required_scope": REQUIRED_SCOPE[capability].value,
            "granted": REQUIRED_SCOPE[capability].value in granted,
        }
        for capability in Capability
    }
