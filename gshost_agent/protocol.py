"""The node protocol: the names, limits and formats the agent and the control plane share
(docs/agent-protocol.md). Both sides import them from here, and only from here; the control
plane imports nothing else of the agent but its game templates.

Standard library only: the agent imports no Django, and this module is the agent's.
"""

from __future__ import annotations

import calendar
import enum
import time

# A report's `last_output`: the game's last console lines, each cut to this width.
LAST_OUTPUT_LINES = 10
LAST_OUTPUT_WIDTH = 200
# A console command: one line of at most this many printable characters.
COMMAND_LIMIT = 1000
# A heartbeat's `readings`: each server's latest stats and at most this many of its players,
# so that the control plane shows them without calling the node.
HEARTBEAT_PLAYERS_LIMIT = 100
# A reading's `minutes`: the per-minute means of the completed minutes the control plane has
# not acknowledged yet, at most this many (a node back after a cut link sends the last hour).
MAX_MINUTES_IN_READING = 60
MINUTE_SECONDS = 60
# Times on the wire: UTC, to the second, with a Z.
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class ServerState(enum.StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    RESTARTING = "restarting"


class ReportKind(enum.StrEnum):
    READY = "ready"
    HALTED = "halted"
    CRASHED = "crashed"
    FAILED_TO_START = "failed_to_start"
    STOPPED_BY_NODE = "stopped_by_node"
    STARTED_BY_NODE = "started_by_node"  # again after a restore that stopped it; `ready` follows
    JOB_PROGRESS = "job_progress"
    JOB_FINISHED = "job_finished"


# Reports of what a game process did carry its pid, exit and last output; job reports do not.
PROCESS_REPORTS = frozenset(
    {
        ReportKind.READY,
        ReportKind.HALTED,
        ReportKind.CRASHED,
        ReportKind.FAILED_TO_START,
        ReportKind.STOPPED_BY_NODE,
        ReportKind.STARTED_BY_NODE,
    }
)
JOB_REPORTS = frozenset({ReportKind.JOB_PROGRESS, ReportKind.JOB_FINISHED})


def last_output(lines: list[str]) -> list[str]:
    """A report's `last_output`: the last LAST_OUTPUT_LINES lines, each cut to the width."""
    return [str(line)[:LAST_OUTPUT_WIDTH] for line in lines[-LAST_OUTPUT_LINES:]]


def format_time(epoch: float | None = None) -> str:
    """`epoch` (now when None) as the protocol writes times."""
    return time.strftime(TIME_FORMAT, time.gmtime(time.time() if epoch is None else epoch))


def parse_time(stamp: object) -> float | None:
    """A protocol time as seconds since the epoch; None when it is not one."""
    if not isinstance(stamp, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(stamp, TIME_FORMAT)))
    except ValueError:
        return None
