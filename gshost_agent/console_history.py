"""A game's console as its supervisor holds it: the last lines, numbered on across the game's
starts (each keeper numbers its own from 1), and whoever listens to each new one."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from gshost_agent.protocol import ConsoleOutput, OutputLine

HELD_LINES = 1000

# Told each line (n, text, daemon) on the event loop, as it comes: the live console sockets.
LineListener = Callable[[int, str, bool], None]


class ConsoleHistory:
    def __init__(self) -> None:
        self.lines: deque[tuple[int, str, bool]] = deque(maxlen=HELD_LINES)  # n, text, daemon
        self.last_n = 0
        self.listeners: list[LineListener] = []
        self._base = 0  # the last number before this run's first line
        self._keeper_n = 0  # the keeper's own number of the last line taken

    def run_begins(self) -> int:
        """A new run of the game, numbered on from the last line; that number."""
        self.lines.clear()
        self._base, self._keeper_n = self.last_n, 0
        return self._base

    def run_resumed(self, base: int) -> None:
        """An earlier agent's run, taken over: its lines are numbered on from `base`."""
        self._base = self.last_n = base
        self._keeper_n = 0

    @property
    def keeper_n(self) -> int:
        return self._keeper_n

    def take(self, n: int, text: str, daemon: bool) -> bool:
        """The keeper's line `n`, held and told to the listeners; False when already taken."""
        if n <= self._keeper_n:
            return False
        self._keeper_n = n
        self.last_n = self._base + n
        self.lines.append((self.last_n, text, daemon))
        for listener in list(self.listeners):
            listener(self.last_n, text, daemon)
        return True

    def run_ended(self, lines_counted: int) -> int:
        """The run is over and its keeper counted `lines_counted` lines (also those printed
        while no agent followed it); the last number."""
        self.last_n = max(self.last_n, self._base + lines_counted)
        return self.last_n

    def after(self, after: int, limit: int = 200) -> ConsoleOutput:
        lines = [OutputLine(*line) for line in self.lines if line[0] > after][:limit]
        return ConsoleOutput(tuple(lines), self.last_n)
