"""A game's console output made cheap to handle, whatever the game prints: the bytes read in
large chunks, split into lines, at most `LINES_PER_SECOND` lines a second kept and the rest
dropped with one notice line a second (`output throttled`), and the lines kept written out in
batches, never a write per line.

The keeper applies it to the game's output as it reads it, so whatever shows the console
after it (the agent's recent lines, its followers, a websocket) gets at most that many lines,
and sees the notice as a line of the node's own (`Line.daemon`), not the game's.

Standard library only: the keeper imports it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

LINES_PER_SECOND = 2000
THROTTLED_NOTICE = "output throttled"
LINE_LIMIT = 4096  # bytes: a longer line is cut, one that never ends comes in pieces
# Output past the cap, or past this many bytes in a second, is a flood (`OutputLines.flooded`).
FLOOD_BYTES_PER_SECOND = 1 << 20
# Lines kept are handed on (written to the log, sent to followers) at most this often, in one
# batch: a game printing a line at a time costs a write per batch, not per line.
BATCH_SECONDS = 0.02
FOLLOWER_BACKLOG = 5000  # lines a follower has not taken yet; past that it is dropped


class Line(NamedTuple):
    text: str
    daemon: bool = False  # the node's own line (the notice), not the game's


THROTTLED = Line(THROTTLED_NOTICE, daemon=True)


class LineLimiter:
    """At most `per_second` lines in each second (a window that opens with the first line
    after the last one closed); past that the rest of the second's lines are dropped, and the
    first drop of a second is said, once."""

    def __init__(self, per_second: int = LINES_PER_SECOND) -> None:
        self.per_second = per_second
        self._window_start = float("-inf")
        self._passed = 0
        self._noticed = False

    def admit(self, count: int, now: float) -> tuple[int, bool]:
        """Of `count` lines arriving at `now` (monotonic seconds), how many pass, and whether
        the notice is due now."""
        if now - self._window_start >= 1.0:
            self._window_start, self._passed, self._noticed = now, 0, False
        passed = min(count, self.per_second - self._passed)
        self._passed += passed
        notice = passed < count and not self._noticed
        self._noticed = self._noticed or notice
        return passed, notice


class OutputLines:
    """Chunks of output, of any size, as the lines the limiter lets through. Dropped lines are
    only counted (one `bytes.count`), never split or decoded: a flood costs little more than
    reading it. `flooded` once the output has passed the cap, or `FLOOD_BYTES_PER_SECOND`."""

    def __init__(self, limiter: LineLimiter, line_limit: int = LINE_LIMIT) -> None:
        self.limiter = limiter
        self.line_limit = line_limit
        self.flooded = False
        self._partial = b""
        self._second = (float("-inf"), 0)  # when it began, bytes read in it

    def feed(self, chunk: bytes, now: float) -> list[Line]:
        began, read = self._second
        self._second = (began, read + len(chunk)) if now - began < 1.0 else (now, len(chunk))
        self.flooded = self.flooded or self._second[1] > FLOOD_BYTES_PER_SECOND
        data = self._partial + chunk if self._partial else chunk
        end = data.rfind(b"\n") + 1
        self._partial = data[end:]
        lines = self._take(data, data.count(b"\n", 0, end), now) if end else []
        while len(self._partial) >= self.line_limit:  # a line that never ends: in pieces
            piece = self._partial[: self.line_limit]
            self._partial = self._partial[self.line_limit :]
            lines += self._take(piece + b"\n", 1, now)
        return lines

    def end(self, now: float) -> list[Line]:
        """The last line, where the output ended without a newline."""
        partial, self._partial = self._partial, b""
        return self._take(partial + b"\n", 1, now) if partial else []

    def _take(self, data: bytes, count: int, now: float) -> list[Line]:
        passed, notice = self.limiter.admit(count, now)
        self.flooded = self.flooded or passed < count
        stop = -1
        for _ in range(passed):  # bounded by the limit, not by what the game printed
            stop = data.index(b"\n", stop + 1)
        kept = data[:stop].split(b"\n") if passed else []
        lines = [Line(self._text(raw)) for raw in kept]
        if notice:
            lines.append(THROTTLED)
        return lines

    def _text(self, raw: bytes) -> str:
        return raw[: self.line_limit].decode("utf-8", errors="replace").rstrip("\r")


class ConsoleLog:
    """The console log, appended to in batches (one `write` each, no buffer of its own: what
    was handed on is on disk for the next reader), moved to `<name>.1` past `limit` bytes:
    two files at most."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self._fd = self._open()

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)

    def write(self, texts: list[str]) -> None:
        os.write(self._fd, ("\n".join(texts) + "\n").encode("utf-8", errors="replace"))
        if os.fstat(self._fd).st_size > self.limit:
            os.close(self._fd)
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
            self._fd = self._open()

    def close(self) -> None:
        os.close(self._fd)


class LineBatcher:
    """Lines handed on to `publish` together: at once when nothing was handed on for
    `BATCH_SECONDS`, else when that time has passed since the last batch."""

    def __init__(self, publish: Callable[[list[Line]], None]) -> None:
        self.publish = publish
        self._pending: list[Line] = []
        self._last = float("-inf")
        self._timer: asyncio.TimerHandle | None = None

    def add(self, lines: list[Line]) -> None:
        if not lines:
            return
        self._pending += lines
        if self._timer is not None:
            return
        loop = asyncio.get_running_loop()
        wait = self._last + BATCH_SECONDS - loop.time()
        if wait <= 0:
            self.flush()
        else:
            self._timer = loop.call_later(wait, self.flush)

    def flush(self) -> None:
        """Whatever is pending, now (also before the game's exit is recorded)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, []
        if pending:
            self._last = asyncio.get_running_loop().time()
            self.publish(pending)


class Follower:
    """What one `follow` connection has still to send: encoded batches of lines."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[bytes, int] | None] = asyncio.Queue()
        self.waiting = 0  # lines in the queue

    def put(self, batch: bytes, lines: int = 0) -> None:
        self.waiting += lines
        self.queue.put_nowait((batch, lines))

    def stalled(self) -> bool:
        return self.waiting > FOLLOWER_BACKLOG


def encoded_lines(lines: list[tuple[int, Line]]) -> bytes:
    items = (
        {"n": n, "text": line.text, "daemon": True} if line.daemon else {"n": n, "text": line.text}
        for n, line in lines
    )
    return "".join(json.dumps(item) + "\n" for item in items).encode()
