"""A process's output read line by line in a thread, so a test waits on the line it expects
(with a deadline) instead of sleeping."""

from __future__ import annotations

import contextlib
import queue
import re
import threading
import time
from typing import IO, Any


class LineReader:
    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def so_far(self) -> list[str]:
        """Every line read until now, those not yet consumed included."""
        with contextlib.suppress(queue.Empty):
            while (line := self._queue.get_nowait()) is not None:
                self.seen.append(line)
            self._queue.put(None)  # the end, for `wait_for` to see
        return list(self.seen)

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


def wait_until(condition, timeout: float = 10.0, interval: float = 0.05):  # type: ignore[no-untyped-def]
    """Polls `condition` (for state kept by another process) until it is truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


def probe(agent: Any, server_id: str, command: str, timeout: float = 20.0) -> str:
    """What a hostile test game answered to `command` (its console line `<probe>: <result>`)."""
    after = agent.request("GET", f"/v1/servers/{server_id}/console").json()["last"]
    assert agent.console(server_id, command).status_code == 200
    name = command.split()[0]

    def answered() -> str | None:
        path = f"/v1/servers/{server_id}/console?after={after}"
        for line in agent.request("GET", path).json()["lines"]:
            if line["text"].startswith(f"{name}: "):
                return str(line["text"]).removeprefix(f"{name}: ")
        return None

    return str(wait_until(answered, timeout, interval=0.1))
