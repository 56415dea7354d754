"""The last readings agent nodes reported. Each heartbeat carries the stats and players of its
node's servers that are not stopped; the panel and the GET routes show these, with the time
they were taken, and never call a node to show them (a slow or silent node slows no page).

They are kept in the cache (Redis in production, shared by every web process), for
READING_TTL_SECONDS: a server whose node went silent shows its last readings, with their age,
until they expire; then none.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.core.cache import cache

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


def readings_keep(readings: dict[str, Reading]) -> None:
    """One write for all of a heartbeat's readings."""
    if readings:
        cache.set_many(
            {_KEY + server_id: r for server_id, r in readings.items()}, READING_TTL_SECONDS
        )


def reading_of(server_id: str) -> Reading | None:
    found = cache.get(_KEY + server_id)
    return found if isinstance(found, Reading) else None


def readings_forget(server_ids: Iterable[str]) -> None:
    cache.delete_many([_KEY + server_id for server_id in server_ids])
