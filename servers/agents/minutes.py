"""The per-minute readings agent nodes send in their heartbeats: each server's completed minutes
its node has not had acknowledged yet (docs/agent-protocol.md). They are checked strictly
(`gshost_agent.protocol.Heartbeat.minutes`), stored as `ServerMinute` rows for 24 h, and are
what a server's metrics are read from, so that metrics never ask the node (a silent node's
servers keep their history).

A heartbeat's minutes are written in one INSERT; a minute already stored (its heartbeat's 200
was lost, or the agent started again) is ignored by the primary key. Five heartbeats in six
carry none and write nothing.
"""

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from gshost.purge import PURGE_BATCH_ROWS, delete_in_batches
from gshost_agent.protocol import Minute
from servers.models import ServerMinute
from servers.runtime import MetricsSample, Reading

MINUTES_KEPT = timedelta(hours=24)  # the longest metrics window
# A minute stamped further ahead than this is a node's clock gone wrong: not stored.
CLOCK_AHEAD = timedelta(minutes=5)
# Rows per INSERT: 5 parameters each, well within SQLite's 999 (a heartbeat's 40 servers' minute
# takes one; a node back after an hour away, 16).
ROWS_PER_INSERT = 150


def server_minutes_keep(*, minutes: Mapping[str, Sequence[Minute]]) -> None:
    """Store the minutes (of servers the caller checked are the node's) in one statement;
    those already stored, older than the 24 h kept, or ahead of the clock are left out.

    One INSERT … VALUES … ON CONFLICT DO NOTHING of up to ROWS_PER_INSERT rows (PostgreSQL and
    SQLite alike) rather than `bulk_create`, which made a model instance of each row
    (bench/heartbeat_readings.py)."""
    now = timezone.now()
    oldest, newest = now - MINUTES_KEPT, now + CLOCK_AHEAD
    stamp = connection.ops.adapt_datetimefield_value
    rows = [
        (server_id, stamp(minute.at), minute.cpu_percent, minute.memory_mb, minute.players_online)
        for server_id, sent in minutes.items()
        for minute in sent
        if oldest <= minute.at <= newest
    ]
    if not rows:
        return
    with connection.cursor() as cursor:
        for first in range(0, len(rows), ROWS_PER_INSERT):
            batch = rows[first : first + ROWS_PER_INSERT]
            values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(batch))
            cursor.execute(_INSERT % values, [value for row in batch for value in row])


# The table's name is the model's, never input.
_INSERT = (
    f"INSERT INTO {ServerMinute._meta.db_table} "  # noqa: S608
    "(server_id, at, cpu_percent, memory_mb, players_online) VALUES %s ON CONFLICT DO NOTHING"
)


def server_minutes_purge_expired(*, batch_rows: int = PURGE_BATCH_ROWS) -> int:
    """Delete minutes older than 24 h, oldest first, a batch per statement (through the `at`
    index); returns how many went. Scheduled hourly (servers.apps)."""
    cutoff = timezone.now() - MINUTES_KEPT
    expired = ServerMinute.objects.filter(at__lt=cutoff).order_by("at")
    return delete_in_batches(expired, batch_rows=batch_rows)


def server_metrics(
    *,
    server_id: str,
    start: datetime,
    end: datetime,
    step: timedelta,
    latest: Reading | None,
) -> list[MetricsSample]:
    """One sample per `step` from `start` (up to `end`) that has minutes: `at` is the step's
    start, the values the means of its minutes. The newest step, while its node has not sent
    a minute of it yet, takes the server's `latest` reading when that was taken in it, so a
    game started a moment ago has a first point."""
    rows = ServerMinute.objects.filter(server_id=server_id, at__gte=start, at__lt=end)
    steps: dict[int, list[tuple[float, float, int]]] = {}
    for at, cpu, memory, players in rows.values_list(
        "at", "cpu_percent", "memory_mb", "players_online"
    ):
        steps.setdefault((at - start) // step, []).append((cpu, memory, players))
    newest = math.ceil((end - start) / step) - 1
    if (
        latest is not None
        and newest not in steps
        and start + newest * step <= latest.sampled_at < end
    ):
        steps[newest] = [(latest.cpu_percent, float(latest.memory_mb), latest.players_online)]
    return [_sample(start + index * step, minutes) for index, minutes in sorted(steps.items())]


def _sample(at: datetime, minutes: list[tuple[float, float, int]]) -> MetricsSample:
    count = len(minutes)
    return MetricsSample(
        at=at,
        cpu_percent=round(sum(cpu for cpu, _, _ in minutes) / count, 1),
        memory_mb=round(sum(memory for _, memory, _ in minutes) / count),
        network_in_kbps=None,
        network_out_kbps=None,
        players_online=round(sum(players for _, _, players in minutes) / count),
    )
