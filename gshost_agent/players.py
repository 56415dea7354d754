"""Who is playing, as the game itself says: its answer to the template's list command, and its
join/leave lines. `joined_at` comes from the join line, else from when the agent first saw the
name."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime

from gshost_agent.protocol import Player, moment_of
from gshost_agent.templates import PlayersSpec


class PlayerRoster:
    def __init__(self, spec: PlayersSpec | None) -> None:
        self.spec = spec
        self.players: dict[str, datetime] = {}  # name -> joined_at
        self.answered = asyncio.Event()
        self.answered_at = -1e9  # time.monotonic() of the game's last answer
        self._rows: list[str] | None = None  # a list answer in rows, being read
        self._skipping = 0  # lines of its heading still to pass over
        self._pattern = re.compile(spec.pattern) if spec else None
        self._join = re.compile(spec.join_pattern) if spec and spec.join_pattern else None
        self._leave = re.compile(spec.leave_pattern) if spec and spec.leave_pattern else None
        self._row = re.compile(spec.row_pattern) if spec and spec.row_pattern else None
        self._end = re.compile(spec.end_pattern) if spec and spec.end_pattern else None

    def clear(self) -> None:
        self.players.clear()
        self._rows = None
        self._skipping = 0

    def on_line(self, text: str) -> None:
        if self.spec is None:
            return
        if self._rows is not None and self._take_row(text):
            return
        if self._join and (found := self._join.search(text)):
            self.players.setdefault(found["name"], moment_of())
        elif self._leave and (found := self._leave.search(text)):
            self.players.pop(found["name"], None)
        elif self._pattern and (found := self._pattern.search(text)):
            if self._row is not None:
                self._rows = []
                self._skipping = self.spec.skip_lines
            else:
                names = found.groupdict().get("names") or ""
                self._replace([n.strip() for n in names.split(self.spec.separator)])

    def _take_row(self, text: str) -> bool:
        assert self._rows is not None
        if self._skipping > 0:
            self._skipping -= 1
            return True
        if self._row and (found := self._row.search(text)):
            self._rows.append(found["name"])
            return True
        if self._end is None or self._end.search(text):
            rows, self._rows = self._rows, None
            self._replace(rows)
            return True
        return False

    def _replace(self, names: list[str]) -> None:
        now = moment_of()
        self.players = {name: self.players.get(name, now) for name in names if name}
        self.answered.set()
        self.answered_at = time.monotonic()

    def listing(self) -> list[Player]:
        return [Player(name, joined_at) for name, joined_at in self.players.items()]
