"""The runtime boundary: everything the control plane asks of the hosts that run servers.

Requests (start, stop, restart, run a job, push settings, kill, remove) are made after the
requesting service has recorded its decision and committed, never inside a transaction nor
holding a row lock: a node that does not answer then holds up only its own caller, and a
refusal is recorded as an outcome (a start not taken is a failed start). A move to a new
address is the simulated node's alone (`address_mover`). The host later reports what happened
through the services (`server_transition`, `job_*`, `migration_complete`; agents through
`servers.agents.reports`), which own the state. Readings (players, stats, metrics, actual
settings, console lines) are answered at once.

There is one runtime for every node (`get_runtime(server)`:
`servers.agents.runtime.NodeRuntime`), which asks the node's agent: over HTTPS
(docs/agent-protocol.md), or, for the simulated node, its agent in process
(`servers.simulated.agent`), which finishes every request after
`SIMULATED_RUNTIME_DELAY_SECONDS` through the task queue and invents plausible, deterministic
readings. What a node's host offers beyond the requests is `host_traits(node)`: callers ask what
a host does, never which kind it is. This module names the boundary only and imports no
implementation, so the services that call the runtime and the hosts that call the services
form no loop.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any, Protocol

from django.utils.module_loading import import_string

from gshost import process_state
from servers.errors import NotOnAgentNodes
from servers.models import Job, Node, NodeKind, Server, ServerMigration

NODE_RUNTIME = "servers.agents.runtime.NodeRuntime"
IN_PROCESS_AGENT = "servers.simulated.agent.SIMULATED_AGENT"


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
class Reading:
    """What a node tells of a server at a moment (an agent in its heartbeats): its stats and
    players. `network_*_kbps` None where the node cannot measure them per server."""

    sampled_at: datetime
    cpu_percent: float
    memory_mb: int
    memory_limit_mb: int | None
    disk_mb: int
    players_online: int
    uptime_seconds: int
    players: tuple[tuple[str, datetime], ...] = ()
    max_players: int | None = None
    network_in_kbps: float | None = None
    network_out_kbps: float | None = None


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
    """Console lines after the one asked for, and the number of the last line there is;
    `as_of` when they are a copy of what a node had then (None: as they are now)."""

    lines: list[ConsoleLine]
    last: int
    as_of: datetime | None = None


class Runtime(Protocol):
    def start(self, server: Server) -> None: ...
    def stop(self, server: Server) -> None: ...
    def restart(self, server: Server) -> None: ...
    def send_command(self, server: Server, command: str) -> CommandResult: ...
    def run_job(self, job: Job) -> None: ...
    def push_settings(self, server: Server) -> None: ...
    def kill(self, server: Server) -> None: ...
    def remove(self, server: Server) -> None:
        """The server's copy on its host gone, its backups there too (a deletion); the
        game must be stopped."""
        ...

    def remove_backup(self, server: Server, backup_id: str) -> None:
        """A deleted backup's archive kept on the server's host gone (gone already: fine)."""
        ...

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


@dataclass(frozen=True)
class HostTraits:
    """What the hosts of a node kind offer besides the Runtime's requests."""

    forwards_ports: bool  # each server is given a port of the node's range
    measures_capacity: bool  # memory and disk are the node's own, counted by placement
    serves_files: bool  # the file API and SFTP
    serves_live_console: bool  # console sockets straight to the node
    keeps_backups_in_bucket: bool  # with object storage configured
    moves_between_nodes: bool  # data and all; otherwise to a new address (`address_mover`)
    has_token: bool  # the node signs in to the control plane with a token of its own
    invents_readings: bool  # made-up readings and mishaps (`simulate`), no real game
    agent_in_process: bool  # its agent answers in this process, no connection (the simulated)


AGENT_TRAITS = HostTraits(
    forwards_ports=True,
    measures_capacity=True,
    serves_files=True,
    serves_live_console=True,
    keeps_backups_in_bucket=True,
    moves_between_nodes=True,
    has_token=True,
    invents_readings=False,
    agent_in_process=False,
)
SIMULATED_TRAITS = HostTraits(
    forwards_ports=False,
    measures_capacity=False,
    serves_files=False,
    serves_live_console=False,
    keeps_backups_in_bucket=False,
    moves_between_nodes=False,
    has_token=False,
    invents_readings=True,
    agent_in_process=True,
)


def host_traits(node: Node) -> HostTraits:
    return AGENT_TRAITS if node.kind == NodeKind.AGENT else SIMULATED_TRAITS


class AddressMover(Protocol):
    """A host that moves a server to a new address (the simulated node's). Agent nodes move
    servers between nodes, data and all (`servers.agents.transfers`), not to an address."""

    def migrate(self, migration: ServerMigration) -> None: ...


class InProcessAgent(AddressMover, Protocol):
    """A node's agent that answers in this process (the simulated node's): the agent's routes
    in the agent's shapes, and its readings when asked, where an agent's come by heartbeat; it
    also moves servers to new addresses."""

    def answer(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
    ) -> tuple[int, bytes]: ...
    def reading(self, server: Server, now: datetime) -> Reading: ...
    def reported_settings(self, server: Server) -> dict[str, str]: ...
    def metrics(
        self, server: Server, start: datetime, end: datetime, step: timedelta
    ) -> list[MetricsSample]: ...
    def sweep(self, now: datetime) -> None: ...


@cache
def _runtime() -> Runtime:
    runtime: Runtime = import_string(NODE_RUNTIME)()
    return runtime


@cache
def _in_process() -> InProcessAgent:
    agent: InProcessAgent = import_string(IN_PROCESS_AGENT)
    return agent


def in_process_agent(node: Node) -> InProcessAgent | None:
    """The agent that answers for `node` in this process (the simulated node's); None for a
    node whose agent is reached over HTTPS."""
    return _in_process() if host_traits(node).agent_in_process else None


def address_mover(server: Server) -> AddressMover:
    """The simulated node's agent; NotOnAgentNodes for a server on an agent node."""
    if host_traits(server.node).moves_between_nodes:
        raise NotOnAgentNodes(
            "A server on an agent node moves to another node, not to an address: "
            "`simulate SERVER_ID migrate --node NAME` or the admin's Migrate to node…."
        )
    return _in_process()


def get_runtime(server: Server) -> Runtime:
    """The runtime of the server's node: the one runtime, whichever the node."""
    return _runtime()


def runtime_sweep(now: datetime) -> None:
    """Called every minute and by follow-ups: the simulated node finishes what is due; agent
    nodes report by themselves, and their jobs fail once their node has been silent too long."""
    _runtime().sweep(now)
    _in_process().sweep(now)


def _reset() -> None:
    _runtime.cache_clear()
    _in_process.cache_clear()


process_state.register(
    "servers.runtime",
    bound="one runtime object and one in-process agent",
    reset=_reset,
)
