"""A game's readings, as its supervisor follows a run: the process tree (CPU and memory), when
the run began, the players its console names, and the samples kept for its metrics."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gshost_agent.players import PlayerRoster
from gshost_agent.protocol import ServerState, Stats, moment_of
from gshost_agent.readings import ProcessTree, Sample, SampleStore
from gshost_agent.settings_files import read_settings
from gshost_agent.templates import GameTemplate

# How long a `players` reading waits for the game's answer to its player-list command.
PLAYERS_ANSWER_SECONDS = 2.0
# A game's answer this recent is not asked again: every question is a line in its console.
PLAYERS_FRESH_SECONDS = 5.0


class GameReadings:
    def __init__(self, samples: SampleStore) -> None:
        self.samples = samples
        self.roster = PlayerRoster(None)
        self.tree: ProcessTree | None = None
        self.started_at: float | None = None

    def run_begins(self, template: GameTemplate) -> None:
        """A run of `template` begins (or is picked up): its players as its console says."""
        self.roster = PlayerRoster(template.players)

    def follow(self, pid: int | None, started_at: float | None) -> None:
        """The run's game process, once its keeper says which it is."""
        self.started_at = started_at
        self.tree = ProcessTree(pid) if pid else None

    def run_ended(self) -> None:
        self.tree = None
        self.roster.clear()

    def on_line(self, text: str) -> None:
        self.roster.on_line(text)

    async def players(
        self, template: GameTemplate | None, running: bool, ask: Callable[[str], Awaitable[None]]
    ) -> list[dict[str, Any]]:
        """The players online: the game asked again (`ask` writes its player-list command),
        unless it answered a moment ago or does not run."""
        fresh = time.monotonic() - self.roster.answered_at < PLAYERS_FRESH_SECONDS
        if running and template and template.players and not fresh:
            self.roster.answered.clear()
            await ask(template.players.command)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.roster.answered.wait(), PLAYERS_ANSWER_SECONDS)
        return [player.to_json() for player in self.roster.listing()]

    def stats(self, state: ServerState, memory_limit_mb: int | None, disk_used_mb: float) -> Stats:
        running = state != ServerState.STOPPED
        cpu, memory = self.usage(running)
        return Stats(
            state=state,
            sampled_at=moment_of(),
            cpu_percent=cpu,
            memory_mb=memory,
            memory_limit_mb=memory_limit_mb,
            disk_mb=disk_used_mb,
            players_online=len(self.roster.players),
            uptime_seconds=self.uptime(running),
        )

    def usage(self, running: bool) -> tuple[float, float]:
        """CPU percent and memory in MB of the game's processes (nothing while stopped)."""
        return self.tree.usage() if self.tree is not None and running else (0.0, 0.0)

    def uptime(self, running: bool) -> int:
        if not running or self.started_at is None:
            return 0
        return int(time.time() - self.started_at)

    def sample(self, state: ServerState) -> None:
        """A point for the metrics, while the game runs."""
        if state == ServerState.STOPPED or self.tree is None:
            return
        cpu, memory = self.usage(running=True)
        self.samples.add(Sample(time.time(), cpu, memory, len(self.roster.players)))


def max_players(server_dir: Path, template: GameTemplate | None) -> int | None:
    """The most players the game takes, from its settings file (else its template's default);
    None when its template says no setting holds it."""
    if template is None or template.players is None or not template.players.max_setting:
        return None
    key = template.players.max_setting
    settings = read_settings(server_dir, template)
    for value in (settings.get(key, ""), template.default_settings().get(key, "")):
        if value.isdigit():
            return int(value)
    return None
