"""The last readings agent nodes reported. Each heartbeat carries the stats and players of its
node's servers that are not stopped; the panel and the GET routes show these, with the time
they were taken, and never call a node to show them (a slow or silent node slows no page).

They are kept in the cache (Redis in production, shared by every web process), for
READING_TTL_SECONDS: a server whose node went silent shows its last readings, with their age,
until they expire; then none. Each is kept under its node and server: a node's readings of a
server that is not its own are never read, so a heartbeat needs no query to check them.
"""

import logging
from dataclasses import dataclass
from datetime import datetime

import redis
from django.core.cache import cache

logger = logging.getLogger(__name__)
# A cache outage costs the readings, never a heartbeat (which keeps the node online).
CACHE_ERRORS = (redis.RedisError, OSError)

READING_TTL_SECONDS = 600
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


def _key(node_id: int, server_id: str) -> str:
    return f"{_KEY}{node_id}:{server_id}"


def readings_keep(node_id: int, readings: dict[str, Reading]) -> None:
    """One write for all of a node's heartbeat's readings."""
    if not readings:
        return
    keyed = {_key(node_id, server_id): reading for server_id, reading in readings.items()}
    try:
        cache.set_many(keyed, READING_TTL_SECONDS)
    except CACHE_ERRORS as error:
        logger.warning("Readings not kept: the cache is unavailable (%s)", type(error).__name__)


def reading_of(node_id: int, server_id: str) -> Reading | None:
    """What the node last reported of the server."""
    try:
        found = cache.get(_key(node_id, server_id))
    except CACHE_ERRORS as error:
        logger.warning("Readings not read: the cache is unavailable (%s)", type(error).__name__)
        return None
    return found if isinstance(found, Reading) else None
