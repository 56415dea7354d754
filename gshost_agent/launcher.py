"""How a game is put on the node: its command from the template, its sandbox and network, and
the keeper that runs it. One per node, shared by its supervisors; what a start means for the
server's state is the supervisor's.

Root's helpers that build the sandbox (nsenter, bwrap, setpriv) run from `/` with nothing of the
template's: the template's environment reaches the game inside the sandbox only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gshost_agent.keepers import KeeperHandle, Zygote
from gshost_agent.layout import Layout, game_python
from gshost_agent.netns import Networks, Slot
from gshost_agent.protocol import StartRequest
from gshost_agent.sandbox import (
    GAME_FILES_INSIDE,
    SANDBOX_PROCESSES,
    GameBox,
    Sandboxing,
    sandboxed_command,
    seccomp_argument,
)
from gshost_agent.server_state import Intent, MemoryRoot
from gshost_agent.templates import GameTemplate

logger = logging.getLogger("gshost_agent.launcher")

# How a start gets its keeper (run directory, spec, zygote): `KeeperHandle.spawn`. The unit
# tests pass fakes.
KeeperSpawner = Callable[[Path, dict[str, Any], Zygote | None], Awaitable[KeeperHandle]]


@dataclass(frozen=True)
class Launch:
    """One start of a server's game: what it runs, where, as whom, within which plan."""

    server_id: str
    request: StartRequest
    template: GameTemplate
    intent: Intent
    directory: Path
    run_dir: Path
    uid: int | None  # the server's own id (None: the agent's user)


class Launcher:
    def __init__(
        self,
        *,
        layout: Layout,
        memory_root: MemoryRoot | None,
        sandboxing: Sandboxing | None = None,
        networks: Networks | None = None,
        zygote: Zygote | None = None,
        spawn_keeper: KeeperSpawner = KeeperHandle.spawn,
    ) -> None:
        self.layout = layout
        self.memory_root = memory_root
        self.sandboxing = sandboxing or Sandboxing(False, "not asked for", allow_unsandboxed=True)
        self.networks = networks
        self.zygote = zygote
        self.spawn_keeper = spawn_keeper

    async def launch(self, launch: Launch) -> KeeperHandle:
        """The game running under its keeper. The intent is saved with its network before a
        keeper runs anything; a keeper that does not come up takes the network with it."""
        game_files = self.layout.install_game_files(launch.template)
        argv = self.command(launch, game_files)
        spec = self._spec(launch, argv)
        if self.sandboxing.sandboxed and self.memory_root is not None:
            sandboxed = await self._sandbox(launch, argv, game_files)
            spec |= self._helpers_spec(sandboxed)
        launch.intent.save(launch.run_dir)
        try:
            keeper = await self.spawn_keeper(launch.run_dir, spec, self.zygote)
        except BaseException:
            await self.close_network(launch.server_id, launch.intent, launch.run_dir)
            raise
        if launch.intent.network is not None and self.networks is not None:
            keeper_pid = (keeper.game() or {}).get("keeper_pid")
            if isinstance(keeper_pid, int):
                self.networks.registry.note_keeper(Slot(launch.intent.network[0]), keeper_pid)
        return keeper

    def command(self, launch: Launch, game_files: Path) -> list[str]:
        values = {
            "{python}": game_python(),
            "{game_files}": GAME_FILES_INSIDE if self.sandboxing.sandboxed else str(game_files),
            "{port}": str(launch.request.port),
            "{memory_mb}": str(launch.request.memory_mb),
            "{server_id}": launch.server_id,
        }
        # Whole placeholders only, each argument on its own: never a shell line.
        return [_substitute(argument, values) for argument in launch.template.command]

    def _spec(self, launch: Launch, argv: list[str]) -> dict[str, Any]:
        """What the keeper is told: the game's command, as run unsandboxed, and its limits."""
        root, request = self.memory_root, launch.request
        spec: dict[str, Any] = {
            "server_id": launch.server_id,
            "argv": argv,
            "env": dict(launch.template.environment),  # unsandboxed: the game's own exec
            "cwd": str(launch.directory),
            "uid": launch.uid,
            "gid": launch.uid,
            "memory_mb": request.memory_mb,
            "cgroup": str(root.path / launch.server_id) if root else "",
            "cgroup_version": root.version if root else 0,
        }
        if self.sandboxing.sandboxed and root is not None:
            spec |= {
                "sandboxed": True,
                "cgroup_pids": str(root.pids / launch.server_id) if root.pids else "",
                "cgroup_cpu": str(root.cpu / launch.server_id) if root.cpu else "",
                "processes": request.processes + SANDBOX_PROCESSES,
                "cpu_percent": request.cpu_percent,
            }
        return spec

    async def _sandbox(self, launch: Launch, argv: list[str], game_files: Path) -> list[str]:
        """The game's network made, and `argv` run in its sandbox."""
        assert self.networks is not None and launch.uid is not None
        owner = {"server_id": launch.server_id, "data_dir": str(self.layout.root)}
        slot = await self.networks.open(owner, launch.request.port)
        launch.intent.network = [slot.number, launch.request.port]
        box = GameBox(
            netns=slot.netns_path,
            server_dir=launch.directory,
            game_files=game_files,
            uid=launch.uid,
            gid=launch.uid,
            memory_mb=launch.request.memory_mb,
            environment=dict(launch.template.environment),
        )
        return sandboxed_command(self.sandboxing, box, argv)

    def _helpers_spec(self, sandboxed: list[str]) -> dict[str, Any]:
        """How the keeper runs root's helpers of a sandboxed game: from `/`, with nothing of
        the template's (bubblewrap gives the game its environment), and the seccomp filter."""
        return {
            "argv": sandboxed,
            "env": {},
            "cwd": "/",
            "seccomp": {
                "path": self.sandboxing.seccomp_filter,
                "argument": seccomp_argument(sandboxed),
            },
        }

    async def close_network(self, server_id: str, intent: Intent | None, run_dir: Path) -> None:
        """The sandbox's network gone, once its game has ended (or never started)."""
        if intent is None or intent.network is None or self.networks is None:
            return
        slot, port = intent.network
        try:
            await self.networks.close(Slot(slot), port)
        except Exception:  # the next agent's sweep removes what is left
            logger.exception("%s: cannot remove the game's network", server_id)
        intent.network = None
        intent.save(run_dir)


def _substitute(argument: str, values: dict[str, str]) -> str:
    for placeholder, value in values.items():
        argument = argument.replace(placeholder, value)
    return argument
