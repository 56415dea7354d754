"""What the agent meant to happen to a server (the intent), what a start asks for, and the
refusals the supervisor, the node and the API share. The states, report kinds and start
requests are the protocol's (`gshost_agent.protocol`)."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from gshost_agent import keeper
from gshost_agent.protocol import (
    COMMAND_LIMIT,
    DEFAULT_PLAN,
    ReportKind,
    ServerState,
    StartRequest,
)

INTENT = "intent.json"


class StopReason(enum.StrEnum):
    NONE = ""
    HALT = "halt"  # asked for (the API or the console's stop command)
    RESTART = "restart"
    NODE = "node"  # on the node's own: the agent ending (--stop-servers-on-exit), a restore
    FAIL = "fail"  # no ready line in time


class InvalidState(Exception):
    def __init__(self, state: ServerState) -> None:
        super().__init__(f"the server is {state}")
        self.state = state


class Busy(InvalidState):
    """Another job runs on the server's data."""

    def __init__(self, state: ServerState, job_kind: str) -> None:
        super().__init__(state)
        self.args = (f"a {job_kind} job is running on this server",)


class InvalidCommand(ValueError):
    pass


class DiskLimitExceeded(Exception):
    """The server's directory holds more than its plan's disk_mb: it does not start."""

    def __init__(self, used_mb: float, limit_mb: int) -> None:
        super().__init__(
            f"the server's directory holds {used_mb:.0f} MB, over its disk limit of "
            f"{limit_mb} MB: remove files (or restore a backup) first"
        )


class Reporter(Protocol):
    def __call__(
        self,
        server_id: str,
        kind: ReportKind,
        details: dict[str, Any],
        *,
        exit_key: str | None = None,
    ) -> None: ...


DEFAULT_DISK_MB = DEFAULT_PLAN.disk_mb


@dataclass
class Intent:
    request: StartRequest
    ready: bool = False
    stop: StopReason = StopReason.NONE
    active: bool = True  # False once its exit has been reported
    line_base: int = 0  # console lines are numbered on from the previous start's
    last_line: int = 0  # the number of this run's last console line, once it has ended
    restart_with: StartRequest | None = None
    network: list[int] | None = None  # the sandbox's network slot and port, while it exists
    disk_limit: bool = False  # stopped by the agent: its directory went over its disk_mb

    def save(self, run_dir: Path) -> None:
        keeper.write_json_atomically(run_dir / INTENT, asdict(self))

    @classmethod
    def load(cls, run_dir: Path) -> Intent | None:
        try:
            data = json.loads((run_dir / INTENT).read_text())
            restart = data.get("restart_with")
            return cls(
                request=StartRequest(**data["request"]),
                ready=bool(data["ready"]),
                stop=StopReason(data["stop"]),
                active=bool(data["active"]),
                line_base=int(data.get("line_base", 0)),
                last_line=int(data.get("last_line", 0)),
                restart_with=StartRequest(**restart) if restart else None,
                network=[int(n) for n in data["network"]] if data.get("network") else None,
                disk_limit=bool(data.get("disk_limit", False)),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class MemoryRoot:
    """Where games' cgroups go (`<path>/<server id>`), and the cgroup version: `path` the
    memory controller's (v2: every controller's), `pids` and `cpu` those of cgroup v1."""

    path: Path
    version: int
    pids: Path | None = None
    cpu: Path | None = None


def console_command_checked(command: object) -> str:
    if not isinstance(command, str) or not command.strip():
        raise InvalidCommand("command must be a non-empty string")
    if len(command) > COMMAND_LIMIT or not command.isprintable():
        raise InvalidCommand(f"one line of at most {COMMAND_LIMIT} printable characters")
    return command
