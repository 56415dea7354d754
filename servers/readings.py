"""Reads that ask the runtime (players, stats, metrics) or summarise rows for polling."""

import math
import re
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from gshost.errors import InvalidInput
from servers.game.config_events import config_events_for_status
from servers.game.settings import desired_settings
from servers.models import Server, ServerMigration
from servers.runtime import ConsoleLines, MetricsSample, PlayerList, StatsSample, get_runtime

DEFAULT_WINDOW = "1h"
MAX_WINDOW = timedelta(hours=24)
MIN_WINDOW = timedelta(minutes=5)
MAX_SAMPLES = 120
_WINDOW = re.compile(r"([1-9][0-9]{0,4})([mh])")
# What parse_window accepts, as the API schema states it: 5m to 1440m, 1h to 24h, or nothing.
WINDOW_PATTERN = (
    r"^(?:(?:[5-9]|[1-9][0-9]|[1-9][0-9]{2}|1[0-3][0-9]{2}|14[0-3][0-9]|1440)m"
    r"|(?:[1-9]|1[0-9]|2[0-4])h|)$"
)


def parse_window(raw: str | None) -> tuple[str, timedelta]:
    """`?window=` as minutes or hours (`30m`, `1h`, `24h`), from 5 minutes to 24 hours."""
    text = DEFAULT_WINDOW if raw is None or raw == "" else raw
    match = _WINDOW.fullmatch(text)
    window = None
    if match:
        amount, unit = int(match[1]), match[2]
        window = timedelta(minutes=amount) if unit == "m" else timedelta(hours=amount)
    if window is None or not MIN_WINDOW <= window <= MAX_WINDOW:
        message = "window is minutes or hours, like 30m or 6h, from 5m to 24h."
        raise InvalidInput(message, fields={"window": [message]})
    return text, window


def interval_for(window: timedelta) -> timedelta:
    """Whole minutes, at most MAX_SAMPLES intervals per window."""
    minutes = max(1, math.ceil(window.total_seconds() / MAX_SAMPLES / 60))
    return timedelta(minutes=minutes)


def players_read(server: Server) -> PlayerList:
    return get_runtime(server).players(server, timezone.now())


def console_lines_read(server: Server, after: int) -> ConsoleLines:
    """The console's lines after line `after`: the game's output on agent nodes, the command
    history with its answers on the simulated node."""
    return get_runtime(server).console_lines(server, after)


def stats_read(server: Server) -> StatsSample:
    return get_runtime(server).stats(server, timezone.now())


def metrics_read(server: Server, window: timedelta) -> tuple[timedelta, list[MetricsSample]]:
    step = interval_for(window)
    now = timezone.now()
    step_seconds = int(step.total_seconds())
    end = datetime.fromtimestamp(int(now.timestamp()) // step_seconds * step_seconds, tz=now.tzinfo)
    return step, get_runtime(server).metrics(server, end - window, end, step)


def migration_status(server: Server) -> dict[str, Any]:
    """The latest migration; `none` (and nulls) for a server that never moved."""
    latest = ServerMigration.objects.filter(server=server).order_by("-started_at", "-id").first()
    if latest is None:
        return {
            "state": "none",
            "started_at": None,
            "completed_at": None,
            "previous_address": None,
            "new_address": None,
            "error": None,
        }
    return {
        "state": latest.state,
        "started_at": latest.started_at,
        "completed_at": latest.completed_at,
        "previous_address": latest.previous_address,
        "new_address": latest.new_address,
        "error": latest.error or None,
    }


def settings_drift(server: Server) -> dict[str, Any]:
    """Desired settings against what the runtime reports the game runs with."""
    desired = desired_settings(server)
    actual = get_runtime(server).actual_settings(server)
    drift = [
        {"key": key, "desired": value, "actual": actual.get(key)}
        for key, value in desired.items()
        if actual.get(key) != value
    ]
    return {"in_sync": not drift, "drift": drift, "checked_at": timezone.now()}


def config_events_status(server: Server) -> dict[str, Any]:
    return {"events": list(config_events_for_status(server, timezone.now()))}
