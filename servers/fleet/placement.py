"""Where a new server goes: a plan's room on a node, and the rule that picks the node
(docs/nodes.md, "Placement").

A node takes a server when it is online, not drained, has every tag asked for, offers the
game, has a free port (agent nodes) and room for the plan: the sum of its servers' plans stays
within its capacity x (1 + overallocate/100), for memory and for disk. Among those, the one
with the most free memory, then the fewest servers; the simulated node only when no agent
node takes it. A node named by staff is checked for the game, a port and room only.

The rule is a plain function over each node's load (`NodeLoad`). `place` applies it in the
caller's transaction and then checks it again under the chosen node's row lock (PostgreSQL;
SQLite's IMMEDIATE transactions let one writer in at a time), so placements made at the same
moment, from any number of processes, never over-commit a node. A node found full under its
lock is let go at once (its savepoint is rolled back, which releases the lock) before the
next one is tried: a placement holds one node lock at a time, so two never deadlock.
"""

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from django.db import transaction
from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

from gshost.errors import InvalidState
from gshost_agent.protocol import DEFAULT_PLAN, PLAN_BOUNDS, ProtocolError, plan_value_checked
from servers.errors import GameNotOnNode, InvalidPlan, NodeFull, NoNodeFits, UnknownGame
from servers.fleet.nodes import simulated_node
from servers.game.registry import games_of, offered_games
from servers.models import Node, NodeState, Server
from servers.runtime import host_traits


@dataclass(frozen=True)
class Plan:
    """What a server may use (its limits on the node), and what placement counts. Its bounds
    are the protocol's (`PLAN_BOUNDS`: what an agent takes in a start request)."""

    memory_mb: int = DEFAULT_PLAN.memory_mb
    disk_mb: int = DEFAULT_PLAN.disk_mb
    cpu_percent: int = DEFAULT_PLAN.cpu_percent  # 100 = one core
    processes: int = DEFAULT_PLAN.processes

    def __post_init__(self) -> None:
        for name, (low, high) in PLAN_BOUNDS.items():
            try:
                plan_value_checked(name, getattr(self, name))
            except ProtocolError:
                message = f"{name} must be a whole number from {low} to {high}."
                raise InvalidPlan(message, name) from None

    @classmethod
    def of(cls, server: Server) -> "Plan":
        return cls(server.memory_mb, server.disk_mb, server.cpu_percent, server.processes)

    def fields(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in PLAN_BOUNDS}


class Short(StrEnum):
    """Why a node does not take a server."""

    UNREACHABLE = "unreachable"
    DRAINED = "drained"
    TAGS = "tags"
    GAME = "game"
    CAPACITY_UNKNOWN = "capacity unknown"
    PORTS = "ports"
    MEMORY = "memory"
    DISK = "disk"


@dataclass(frozen=True)
class NodeLoad:
    """A node and what its servers commit of it."""

    node: Node
    servers: int
    memory_committed: int
    disk_committed: int
    used_ports: int

    @property
    def forwards_ports(self) -> bool:
        """Whether its servers take a port of its range (not on the simulated node)."""
        return host_traits(self.node).forwards_ports

    @property
    def free_ports(self) -> int | None:
        """None for a node whose servers take no port."""
        return max(0, self.node.port_count - self.used_ports) if self.forwards_ports else None

    def limit(self, capacity: int | None) -> int | None:
        """Capacity with overallocation; None when not known (the simulated node: no limit)."""
        if capacity is None:
            return None
        return capacity * (100 + self.node.overallocate_percent) // 100

    @property
    def free_memory(self) -> float:
        limit = self.limit(self.node.memory_mb)
        return math.inf if limit is None else limit - self.memory_committed

    @property
    def free_disk(self) -> float:
        limit = self.limit(self.node.disk_mb)
        return math.inf if limit is None else limit - self.disk_committed

    @property
    def capacity_known(self) -> bool:
        node = self.node
        measured = node.memory_mb is not None and node.disk_mb is not None
        return measured or not host_traits(node).measures_capacity


def room_shortage(load: NodeLoad, game: str | None, plan: Plan) -> Short | None:
    """What the node lacks for this server, whoever chose the node; None when it has room."""
    if game is not None and game not in games_of(load.node):
        return Short.GAME
    if load.free_ports == 0:
        return Short.PORTS
    if plan.memory_mb > load.free_memory:
        return Short.MEMORY
    if plan.disk_mb > load.free_disk:
        return Short.DISK
    return None


def shortage(load: NodeLoad, game: str | None, plan: Plan, tags: Sequence[str]) -> Short | None:
    """What keeps the placement rule from choosing this node; None when it may."""
    node = load.node
    if node.state() != NodeState.ONLINE:
        return Short.UNREACHABLE
    if node.drained:
        return Short.DRAINED
    if not set(tags) <= set(node.tags or ()):
        return Short.TAGS
    if not load.capacity_known:
        return Short.CAPACITY_UNKNOWN
    return room_shortage(load, game, plan)


def rank(loads: Iterable[NodeLoad]) -> list[NodeLoad]:
    """Nodes that run real games first (agent nodes), the most free memory, then the fewest
    servers (then the oldest)."""
    return sorted(
        loads,
        key=lambda n: (host_traits(n.node).invents_readings, -n.free_memory, n.servers, n.node.id),
    )


NAMES_SHOWN = 5
_SAYING = {
    Short.MEMORY: "memory is short on {}",
    Short.DISK: "disk is short on {}",
    Short.PORTS: "ports are short on {}",
    Short.CAPACITY_UNKNOWN: "capacity is unknown on {}",
    Short.DRAINED: "drained: {}",
    Short.UNREACHABLE: "unreachable: {}",
    Short.TAGS: "without the tags: {}",
}


def refusal(
    loads: Sequence[NodeLoad], game: str | None, plan: Plan, tags: Sequence[str]
) -> NoNodeFits:
    """No node takes the server: the refusal names what is short, and where (nodes that do
    not offer the game do not count)."""
    short: dict[Short, list[str]] = {}
    for load in loads:
        why = shortage(load, game, plan, tags)
        if why is not None and why != Short.GAME:
            short.setdefault(why, []).append(load.node.name)
    parts = [saying.format(_names(short[why])) for why, saying in _SAYING.items() if why in short]
    wanted = f"{plan.memory_mb} MB memory, {plan.disk_mb} MB disk"
    reasons = "; ".join(parts) or "no node offers the game"
    return NoNodeFits(f"No node can take this server ({wanted}): {reasons}.")


def _names(names: list[str]) -> str:
    shown = ", ".join(sorted(names)[:NAMES_SHOWN])
    more = len(names) - NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


# Against the database


def nodes_with_usage() -> QuerySet[Node]:
    """Nodes with `server_count`, `used_ports` (servers holding a port), and the memory and
    disk their servers' plans commit, annotated (one query)."""
    return Node.objects.annotate(
        server_count=Count("servers"),
        used_ports=Count("servers", filter=Q(servers__port__isnull=False)),
        memory_committed=Coalesce(Sum("servers__memory_mb"), 0),
        disk_committed=Coalesce(Sum("servers__disk_mb"), 0),
    )


def load_of(node: Node) -> NodeLoad:
    """A node from `nodes_with_usage`, as a load."""
    return NodeLoad(
        node=node,
        servers=int(getattr(node, "server_count", 0)),
        memory_committed=int(getattr(node, "memory_committed", 0)),
        disk_committed=int(getattr(node, "disk_committed", 0)),
        used_ports=int(getattr(node, "used_ports", 0)),
    )


def node_loads() -> list[NodeLoad]:
    return [load_of(node) for node in nodes_with_usage().order_by("id")]


def _locked_load(node_id: int) -> NodeLoad:
    """The node's row locked until the transaction ends, and its load read after the lock
    was granted (so it counts every placement committed before)."""
    node = Node.objects.select_for_update().get(id=node_id)
    counts = Server.objects.filter(node_id=node_id).aggregate(
        servers=Count("id"),
        used_ports=Count("id", filter=Q(port__isnull=False)),
        memory=Coalesce(Sum("memory_mb"), 0),
        disk=Coalesce(Sum("disk_mb"), 0),
    )
    return NodeLoad(node, counts["servers"], counts["memory"], counts["disk"], counts["used_ports"])


def resize_refusal(server: Server, plan: Plan) -> NoNodeFits | None:
    """Why the server's node cannot hold it with `plan` in place of its own, under the node's
    row lock (call inside a transaction); None when it can. Only growth is checked."""
    locked = _locked_load(server.node_id)
    current = Plan.of(server)
    for short, grows, free in (
        (Short.MEMORY, plan.memory_mb - current.memory_mb, locked.free_memory),
        (Short.DISK, plan.disk_mb - current.disk_mb, locked.free_disk),
    ):
        if grows > 0 and grows > free:
            return NoNodeFits(
                f"Node {locked.node.name!r} has no room for this server's new plan: "
                f"{_SAYING[short].format(locked.node.name)} ({grows} MB more needed, "
                f"{max(0, int(free))} MB free)."
            )
    return None


def placement_refusal(
    *, game: str | None, plan: Plan, tags: Sequence[str] = ()
) -> UnknownGame | NoNodeFits | None:
    """Why no node would take the server now (a form's check before it is placed); None
    when one would. `place` decides, under the node's lock."""
    simulated_node()
    loads = node_loads()
    offered = offered_games([load.node for load in loads])
    if game is not None and game not in offered:
        return UnknownGame(game, offered)
    if any(shortage(load, game, plan, tags) is None for load in loads):
        return None
    return refusal(loads, game, plan, tags)


class _TakenMeanwhile(InvalidState):
    """The node had room when ranked, not any more under its lock."""


def place(
    *,
    game: str | None,
    plan: Plan,
    tags: Sequence[str] = (),
    node: Node | None = None,
    build: Callable[[Node], Server],
) -> Server:
    """`build(node)` (which saves the server) on the node the rule picks, or on `node`,
    under that node's row lock. Call inside a transaction. UnknownGame when no node offers
    the game; NoNodeFits, GameNotOnNode or NodeFull when no node, or not `node`, takes it."""
    simulated_node()  # in every installation (a flushed database makes it again)
    loads = node_loads()
    if game is not None and game not in offered_games([load.node for load in loads]):
        raise UnknownGame(game, offered_games([load.node for load in loads]))
    if node is not None:
        return _place_on(node, game, plan, build)
    for candidate in rank(load for load in loads if shortage(load, game, plan, tags) is None):
        try:
            with transaction.atomic():  # a savepoint: rolled back, it lets the lock go
                locked = _locked_load(candidate.node.id)
                if shortage(locked, game, plan, tags) is not None:
                    raise _TakenMeanwhile()
                return build(locked.node)
        except _TakenMeanwhile:
            continue
    raise refusal(node_loads(), game, plan, tags)


def _place_on(node: Node, game: str | None, plan: Plan, build: Callable[[Node], Server]) -> Server:
    locked = _locked_load(node.id)
    why = room_shortage(locked, game, plan)
    if why == Short.GAME:
        raise GameNotOnNode(node.name, str(game), games_of(node))
    if why == Short.PORTS:
        raise NodeFull(node.name, node.first_port, node.last_port)
    if why is not None:
        committed = locked.memory_committed if why == Short.MEMORY else locked.disk_committed
        limit = locked.limit(node.memory_mb if why == Short.MEMORY else node.disk_mb)
        needs = plan.memory_mb if why == Short.MEMORY else plan.disk_mb
        raise NoNodeFits(
            f"Node {node.name!r} has no room for this server's {why.value}: {committed} of "
            f"{limit} MB committed, the plan needs {needs} MB."
        )
    return build(locked.node)
