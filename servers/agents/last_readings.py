"""The last readings agent nodes reported. Each heartbeat carries the stats and players of its
node's servers that are not stopped, and every server's settings file as it is on disk; the
panel and the GET routes show these (stats with the time they were taken, drift against the
settings file), and never call a node to show them (a slow or silent node slows no page).

They are kept in the cache (Redis in production, shared by every web process), for
READING_TTL_SECONDS: a server whose node went silent shows its last readings, with their age,
until they expire; then none. A heartbeat's readings are kept as they came, in one entry
under its node (a node's readings of a server not its own are never read, so a heartbeat
needs no query); one server's are checked when they are read (`gshost_agent.protocol.Reading`)
and shown only if sound. A heartbeat stays cheap: 500 nodes send 50 a second.
"""

import logging
from typing import Any

import redis
from django.core.cache import cache

from gshost_agent.protocol import ProtocolError
from gshost_agent.protocol import Reading as SentReading
from servers.runtime import Reading

logger = logging.getLogger(__name__)
# A cache outage costs the readings, never a heartbeat (which keeps the node online).
CACHE_ERRORS = (redis.RedisError, OSError)

READING_TTL_SECONDS = 600
_KEY = "gshost:reading:"


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
    sent = _sent(node_id, server_id)
    if sent is None or sent.stats is None:
        return None  # none reported (a server the node has stopped reports its settings only)
    stats = sent.stats
    return Reading(
        sampled_at=stats.sampled_at,
        cpu_percent=stats.cpu_percent,
        memory_mb=int(stats.memory_mb),
        memory_limit_mb=stats.memory_limit_mb,
        disk_mb=int(stats.disk_mb),
        players_online=stats.players_online,
        uptime_seconds=stats.uptime_seconds,
        players=tuple((player.name, player.joined_at) for player in sent.players),
        max_players=sent.max_players,
    )


def reported_settings_of(node_id: int, server_id: str) -> dict[str, str] | None:
    """The server's settings file as its node last reported it; None when it did not."""
    sent = _sent(node_id, server_id)
    if sent is None or sent.settings is None:
        return None
    return {str(key): str(value) for key, value in sent.settings.items()}


def _sent(node_id: int, server_id: str) -> SentReading | None:
    """The server's reading as its node's last heartbeat carried it, read now; None when
    there is none, or none that is sound."""
    try:
        found = cache.get(_key(node_id))
    except CACHE_ERRORS as error:
        logger.warning("Readings not read: the cache is unavailable (%s)", type(error).__name__)
        return None
    entry = found.get(server_id) if isinstance(found, dict) else None
    if entry is None:
        return None
    try:
        return SentReading.from_json(entry)
    except ProtocolError:
        logger.warning("Node %s: its reading of %s is malformed", node_id, server_id)
        return None
