"""The runtime boundary: everything the control plane asks of the hosts that run servers.

Requests (start, stop, restart, run a job, migrate, push settings, kill) are made inside the
requesting service's transaction: the simulated hosts act once it commits, an agent is asked
at once so that its refusal rolls the request back. The host later reports what happened
through the services (`server_transition`, `job_*`, `migration_complete`; agents through
`servers.node_reports`), which own the state. Readings (players, stats, metrics, actual
settings, console lines) are answered at once.

Each server's node decides its runtime (`get_runtime(server)`): the simulated node has
`servers.simulated_runtime.SimulatedRuntime` (or the `SERVER_RUNTIME` setting), which finishes
every request after `SIMULATED_RUNTIME_DELAY_SECONDS` through the task queue and invents
plausible, deterministic readings; an agent node has `servers.agent_runtime.AgentRuntime`,
which asks the node's agent over HTTPS (docs/agent-protocol.md). This module names the boundary only
and imports no implementation, so the services that call the runtime and the hosts that call
the services form no loop.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Protocol

from django.conf import settings
from django.utils.module_loading import import_string

from gshost import process_state
from servers.models import Job, Server, ServerMigration

DEFAULT_RUNTIME = "servers.simulated_runtime.SimulatedRuntime"
AGENT_RUNTIME = "servers.agent_runtime.AgentRuntime"


@dataclass(frozen=True)
class Player:
    name: str
    joined_at: datetime


@dataclass(frozen=True)
class PlayerList:
    count: int
    max: int
    players: list[Player]


@dataclass(frozen=True)
class StatsSample:
    state: str
    sampled_at: datetime
    cpu_percent: float
    memory_mb: int
    memory_limit_mb: int
    disk_mb: int
    network_in_kbps: float | None  # None where the node cannot measure it per server
    network_out_kbps: float | None
    players_online: int
    uptime_seconds: int


@dataclass(frozen=True)
class MetricsSample:
    at: datetime
    cpu_percent: float
    memory_mb: int
    network_in_kbps: float | None
    network_out_kbps: float | None
    players_online: int


@dataclass(frozen=True)
class CommandResult:
    accepted: bool
    output: str


@dataclass(frozen=True)
class ConsoleLine:
    n: int
    text: str


@dataclass(frozen=True)
class ConsoleLines:
    """Console lines after the one asked for, and the number of the last line there is."""

    lines: list[ConsoleLine]
    last: int


class Runtime(Protocol):
    def start(self, server: Server) -> None: ...
    def stop(self, server: Server) -> None: ...
    def restart(self, server: Server) -> None: ...
    def send_command(self, server: Server, command: str) -> CommandResult: ...
    def run_job(self, job: Job) -> None: ...
    def migrate(self, migration: ServerMigration) -> None: ...
    def push_settings(self, server: Server) -> None: ...
    def kill(self, server: Server) -> None: ...

    def players(self, server: Server, now: datetime) -> PlayerList: ...
    def stats(self, server: Server, now: datetime) -> StatsSample: ...
    def metrics(
        self, server: Server, start: datetime, end: datetime, step: timedelta
    ) -> list[MetricsSample]: ...
    def actual_settings(self, server: Server) -> dict[str, str]: ...
    def console_lines(self, server: Server, after: int) -> ConsoleLines: ...

    def sweep(self, now: datetime) -> None:
        """Called every minute: finish or time out whatever is overdue."""
        ...


@cache
def _load(path: str) -> Runtime:
    runtime: Runtime = import_string(path)()
    return runtime


def simulated_runtime() -> Runtime:
    return _load(getattr(settings, "SERVER_RUNTIME", DEFAULT_RUNTIME))


def get_runtime(server: Server) -> Runtime:
    """The runtime of the server's node."""
    node = server.node
    return _load(AGENT_RUNTIME) if node.is_agent else simulated_runtime()


def runtime_sweep(now: datetime) -> None:
    """Called every minute and by follow-ups: the simulated node finishes what is due; agent
    nodes report by themselves, and their jobs fail once their node has been silent too long."""
    simulated_runtime().sweep(now)
    _load(AGENT_RUNTIME).sweep(now)


process_state.register(
    "servers.runtime",
    bound="one runtime object per SERVER_RUNTIME path in use: one",
    reset=_load.cache_clear,
)
