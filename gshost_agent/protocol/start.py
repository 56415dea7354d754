"""What a start (or a restart) asks of the agent: the game, its port and settings, and its
plan, the limits its sandbox enforces (`POST /v1/servers/{id}/start`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gshost_agent.protocol.names import ProtocolError

# A plan's numbers, each from `least` to `most`: beyond them a value is a typo, not a plan.
# The control plane checks a plan with these when it is set; the agent when it is asked to
# start a server with it.
PLAN_BOUNDS: dict[str, tuple[int, int]] = {
    "memory_mb": (32, 1_048_576),
    "disk_mb": (1, 16_777_216),
    "cpu_percent": (1, 102_400),  # 100 = one core
    "processes": (1, 4_194_304),
}


def plan_value_checked(name: str, value: Any) -> int:
    """`value` as plan member `name`; ProtocolError (of `name`) beyond PLAN_BOUNDS."""
    least, most = PLAN_BOUNDS[name]
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ProtocolError(name, f"{name}: an integer from {least} to {most}")
    return value


@dataclass(frozen=True)
class Plan:
    """What a server may use on its node."""

    memory_mb: int = 1024
    disk_mb: int = 10240
    cpu_percent: int = 100
    processes: int = 256

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in PLAN_BOUNDS}

    @classmethod
    def from_json(cls, body: Any) -> Plan:
        """The plan's members of `body`, each its default when absent."""
        if not isinstance(body, dict):
            raise ProtocolError("plan", "a plan is a JSON object")
        defaults = cls()
        return cls(
            **{
                name: plan_value_checked(name, body.get(name, getattr(defaults, name)))
                for name in PLAN_BOUNDS
            }
        )


DEFAULT_PLAN = Plan()


@dataclass(frozen=True)
class StartRequest:
    """A start's body; the agent keeps it (its members by name) to start the game again."""

    game: str
    port: int
    memory_mb: int = DEFAULT_PLAN.memory_mb
    settings: dict[str, Any] = field(default_factory=dict)
    disk_mb: int = DEFAULT_PLAN.disk_mb
    cpu_percent: int = DEFAULT_PLAN.cpu_percent
    processes: int = DEFAULT_PLAN.processes

    @property
    def plan(self) -> Plan:
        return Plan(self.memory_mb, self.disk_mb, self.cpu_percent, self.processes)

    def to_json(self) -> dict[str, Any]:
        return (
            {"game": self.game, "port": self.port}
            | self.plan.to_json()
            | {"settings": self.settings}
        )

    @classmethod
    def from_json(cls, body: Any) -> StartRequest:
        if not isinstance(body, dict):
            raise ProtocolError("body", "the body must be a JSON object")
        game, port, settings = body.get("game"), body.get("port"), body.get("settings", {})
        if not isinstance(game, str):
            raise ProtocolError("game", "game: a game name is required")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ProtocolError("port", "port: an integer from 1 to 65535")
        if not isinstance(settings, dict):
            raise ProtocolError("settings", "settings: an object")
        plan = Plan.from_json(body)
        return cls(game=game, port=port, settings=settings, **plan.to_json())
