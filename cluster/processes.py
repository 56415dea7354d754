"""The cluster's processes: each in a session (and process group) of its own, so signalling
its group reaches everything it forked (gunicorn's workers, qcluster's), and stopping is
SIGTERM to every group, then SIGKILL to whatever is left after a grace period."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Process:
    name: str
    argv: list[str]
    log: Path
    env: Mapping[str, str]
    cwd: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=dict(self.env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was never started"
        return self.popen.pid

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal_group(self, signum: int) -> None:
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signum)

    def group_alive(self) -> bool:
        if self.popen is None:
            return False
        self.popen.poll()  # reap the leader, or kill(0) would see its zombie
        try:
            os.killpg(self.popen.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL to the whole group, as if its machine lost power; returns once every
        process of the group is dead (its children too, which its own exit does not wait for)."""
        self.signal_group(signal.SIGKILL)
        if self.popen is None:
            return
        self.popen.wait()
        deadline = time.monotonic() + 5
        while _live_members(self.popen.pid) and time.monotonic() < deadline:
            time.sleep(0.01)


def _live_members(group: int) -> bool:
    """Whether a process of the group still runs (a zombie waiting for its reaper does not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def stop_all(processes: Iterable[Process], grace_seconds: float) -> None:
    processes = [p for p in processes if p.popen is not None]
    for process in processes:
        process.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline and any(p.group_alive() for p in processes):
        time.sleep(0.1)
    for process in processes:
        if process.group_alive():
            process.signal_group(signal.SIGKILL)
        if process.popen is not None:
            process.popen.wait()
