"""A process's output read line by line in a thread, so a test waits on the line it expects
(with a deadline) instead of sleeping."""

from __future__ import annotations

import queue
import re
import socket
import threading
import time
from typing import IO


class LineReader:
    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, pattern: str, timeout: float = 10.0) -> str:
        """The first line not yet consumed that matches `pattern`."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"output ended before {pattern!r}; seen {self.seen}")
            self.seen.append(line)
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no line matching {pattern!r} within {timeout} s; seen {self.seen}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(condition, timeout: float = 10.0, interval: float = 0.05):  # type: ignore[no-untyped-def]
    """Polls `condition` (for state kept by another process) until it is truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")
