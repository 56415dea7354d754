"""The protocol's names, limits and time format (docs/agent-protocol.md)."""

from __future__ import annotations

import enum
import re
import time
from datetime import UTC, datetime

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
# Times on the wire: UTC, to the second, with a Z. Read: any ISO 8601 time with its offset.
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

# The ids the agent's routes take (a `..` never matches).
SERVER_ID = re.compile(r"srv_[0-9A-Za-z]{16,40}")
# The ids bodies carry: made by the control plane (the routes' are a subset).
SERVER_ID_IN_BODY = re.compile(r"srv_[0-9A-Za-z]{1,40}")
JOB_ID = re.compile(r"job_[0-9A-Za-z]{1,40}")
BACKUP_ID = re.compile(r"bkp_[0-9A-Za-z]{1,40}")
OUTBOX_ID = re.compile(r"[0-9A-Za-z_.:-]{1,100}")  # the agent makes `obx_` and 24 hex digits
SHA256 = re.compile(r"[0-9a-f]{64}")
GAME_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")  # a template's name (gshost_agent.templates)


class ProtocolError(ValueError):
    """A message that is not of the protocol's shape; `field` names the member at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


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
    FILES_CHANGED = "files_changed"  # a person changed the server's files over SFTP


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
# What a `files_changed` report says was done, with the paths it names (a rename: from, to).
FILE_CHANGES = {"files.write": 1, "files.directory": 1, "files.delete": 1, "files.rename": 2}


def last_output(lines: list[str] | tuple[str, ...]) -> list[str]:
    """A report's `last_output`: the last LAST_OUTPUT_LINES lines, each cut to the width."""
    return [str(line)[:LAST_OUTPUT_WIDTH] for line in lines[-LAST_OUTPUT_LINES:]]


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def printable(line: str) -> str:
    """A game's output as text a database and a webhook receiver take: no NUL or other
    control character (a tab stays), no lone surrogate."""
    return _CONTROL.sub("", line.encode("utf-8", "replace").decode("utf-8"))


def format_time(at: float | datetime | None = None) -> str:
    """`at` (seconds since the epoch, or a time; now when None) as the protocol writes times."""
    epoch = at.timestamp() if isinstance(at, datetime) else at
    return time.strftime(TIME_FORMAT, time.gmtime(time.time() if epoch is None else epoch))


def moment_of(epoch: float | None = None) -> datetime:
    """`epoch` (now when None) as a time in UTC, to the second, as the wire carries it."""
    seconds = int(time.time() if epoch is None else epoch)
    return datetime.fromtimestamp(seconds, UTC)


def parse_moment(stamp: object) -> datetime | None:
    """An ISO 8601 time with its offset as a time; None when it is not one."""
    if not isinstance(stamp, str):
        return None
    try:
        found = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return found if found.tzinfo is not None else None


def parse_time(stamp: object) -> float | None:
    """A protocol time as seconds since the epoch; None when it is not one."""
    found = parse_moment(stamp)
    return None if found is None else found.timestamp()
