"""What a server can do: its game decides what is supported (else 501 not_supported), its
plan what is enabled (else 403 feature_not_enabled), and the key what is granted (else 403
insufficient_scope). GET /servers/{id}/capabilities tells all three."""

from collections.abc import Iterable
from enum import StrEnum

from accounts.scopes import Scope
from servers.errors import CapabilityNotSupported, FeatureNotEnabled
from servers.game.registry import template
from servers.models import Server


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

# An operator's own template lives on its nodes, which list its capabilities in their
# heartbeats. Settings need the template's fields, which only a shipped template gives the
# control plane, so such a game never has these.
NEEDS_SHIPPED_TEMPLATE: frozenset[Capability] = frozenset(
    {Capability.SETTINGS, Capability.CONFIG_EVENTS}
)
# What the agent does for any game, for a node that does not list its templates' capabilities.
ANY_TEMPLATE: frozenset[Capability] = (
    frozenset(Capability) - NEEDS_SHIPPED_TEMPLATE - {Capability.PLAYERS}
)


def is_supported(server: Server, capability: Capability) -> bool:
    """A shipped template's game (a simulated one's too) supports what its template lists, an
    operator's own game what its node says its template lists (ANY_TEMPLATE when the node
    does not say), settings aside."""
    known = template(server.game)
    if known is not None:
        return capability.value in known.capabilities
    listed = (server.node.game_capabilities or {}).get(server.game)
    if listed is None:
        return capability in ANY_TEMPLATE
    return capability.value in listed and capability not in NEEDS_SHIPPED_TEMPLATE


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
