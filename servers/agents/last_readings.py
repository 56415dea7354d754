"""The last readings agent nodes reported. Each heartbeat carries the stats and players of its
node's servers that are not stopped, and every server's settings file as it is on disk; the
panel and the GET routes show these (stats with the time they were taken, drift against the
settings file), and never call a node to show them (a slow or silent node slows no page).

They are kept in the cache (Redis in production, shared by every web process), for
READING_TTL_SECONDS: a server whose node went silent shows its last readings, with their age,
until they expire; then none. A heartbeat's readings are kept as they came, in one entry
under its node (a node's readings of a server not its own are never read, so a heartbeat
needs no query); one server's are checked when they are read, and shown only if sound. A
heartbeat stays cheap: 500 nodes send 50 a second.
"""

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
from django.core.cache import cache

from gshost_agent.protocol import HEARTBEAT_PLAYERS_LIMIT
from servers.errors import InvalidReading

logger = logging.getLogger(__name__)
# A cache outage costs the readings, never a heartbeat (which keeps the node online).
CACHE_ERRORS = (redis.RedisError, OSError)

READING_TTL_SECONDS = 600
MAX_NAME = 100  # a player's name, in characters
_KEY = "gshost:reading:"


@dataclass(frozen=True)
class Reading:
    sampled_at: datetime
    cpu_percent: float
    memory_mb: int
    memory_limit_mb: int | None
    disk_mb: int
    players_online: int
    uptime_seconds: int
    players: tuple[tuple[str, datetime], ...] = ()
    max_players: int | None = None


def _key(node_id: int) -> str:
    return f"{_KEY}{node_id}"


def readings_keep(node_id: int, readings: dict[str, Any]) -> None:
    """A node's heartbeat's readings, as they came: one cache write."""
    try:
        cache.set(_key(node_id), readings, READING_TTL_SECONDS)
    except CACHE_ERRORS as error:
        logger.warning("Readings not kept: the cache is unavailable (%s)", type(error).__name__)


def reading_of(node_id: int, server_id: str) -> Reading | None:
    """What the node last reported of the server; None when nothing (sound) was."""
    try:
        found = cache.get(_key(node_id))
    except CACHE_ERRORS as error:
        logger.warning("Readings not read: the cache is unavailable (%s)", type(error).__name__)
        return None
    entry = found.get(server_id) if isinstance(found, dict) else None
    if not isinstance(entry, dict) or "sampled_at" not in entry:
        return None  # none reported (a server the node has stopped reports its settings only)
    try:
        return parse_reading(entry)
    except (KeyError, TypeError, ValueError, InvalidReading):
        logger.warning("Node %s: its reading of %s is malformed", node_id, server_id)
        return None


def reported_settings_of(node_id: int, server_id: str) -> dict[str, str] | None:
    """The server's settings file as its node last reported it; None when it did not."""
    try:
        found = cache.get(_key(node_id))
    except CACHE_ERRORS as error:
        logger.warning("Settings not read: the cache is unavailable (%s)", type(error).__name__)
        return None
    entry = found.get(server_id) if isinstance(found, dict) else None
    values = entry.get("settings") if isinstance(entry, dict) else None
    if not isinstance(values, dict):
        return None
    return {str(key): str(value) for key, value in values.items()}


def _number(value: Any, *, whole: bool = True) -> Any:
    kinds = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not 0 <= value < 2**53:
        raise InvalidReading("not a non-negative number")
    return value


def _optional(value: Any) -> int | None:
    return None if value is None else int(_number(value))


def _moment(value: Any) -> datetime:
    moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    if moment is None or moment.tzinfo is None:
        raise InvalidReading("not a time with its offset")
    return moment


def parse_reading(value: dict[str, Any]) -> Reading:
    """One server's reading as the agent sent it (docs/agent-protocol.md, the heartbeat);
    InvalidReading (or the ValueError, TypeError or KeyError of a value of the wrong kind)
    when it is not sound."""
    players = value.get("players") or []
    if not isinstance(players, list) or len(players) > HEARTBEAT_PLAYERS_LIMIT:
        raise InvalidReading("players")
    listed = []
    for player in players:
        name = player["name"]
        if not isinstance(name, str) or len(name) > MAX_NAME or not name.isprintable():
            raise InvalidReading("a player's name")
        listed.append((name, _moment(player["joined_at"])))
    return Reading(
        sampled_at=_moment(value["sampled_at"]),
        cpu_percent=float(_number(value["cpu_percent"], whole=False)),
        memory_mb=int(_number(value["memory_mb"], whole=False)),
        memory_limit_mb=_optional(value.get("memory_limit_mb")),
        disk_mb=int(_number(value["disk_mb"], whole=False)),
        players_online=int(_number(value["players_online"])),
        uptime_seconds=int(_number(value["uptime_seconds"])),
        players=tuple(listed),
        max_players=_optional(value.get("max_players")),
    )
