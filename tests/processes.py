"""Processes as Linux's /proc shows them, for the tests and benchmarks that start real ones
(qcluster, `make run`) and must see what is left of them, what they use, and how they end."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Process:
    pid: int
    name: str  # the command name, as in ps's "comm"
    state: str  # "R", "S", ... "Z" for a zombie
    parent: int
    group: int
    cpu_seconds: float  # user + system time so far

    @property
    def alive(self) -> bool:
        return self.state != "Z"


def process(pid: int) -> Process | None:
    """The process ``pid``, or None once it is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The name is in parentheses and may hold spaces or ")": split after the last one.
    fields = stat[stat.rindex(")") + 2 :].split()
    return Process(
        pid=pid,
        name=stat[stat.index("(") + 1 : stat.rindex(")")],
        state=fields[0],
        parent=int(fields[1]),
        group=int(fields[2]),
        cpu_seconds=(int(fields[11]) + int(fields[12])) / _TICKS_PER_SECOND,
    )


def processes() -> Iterator[Process]:
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (found := process(int(entry.name))) is not None:
            yield found


def group_members(group: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    return [p.pid for p in processes() if p.group == group and p.alive]


def descendants(root: int) -> set[int]:
    """Every process started, directly or not, by ``root`` (and still in the table)."""
    parents = {p.pid: p.parent for p in processes()}
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def command_line(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def resident_kib(pid: int) -> int:
    """Resident memory (VmRSS) in KiB; 0 once the process is gone."""
    with contextlib.suppress(OSError):
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def stop_group(leader: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """The process group `leader` leads (started with start_new_session): SIGTERM, then
    SIGKILL after `timeout` seconds."""
    if leader.poll() is not None:
        return
    os.killpg(leader.pid, signal.SIGTERM)
    try:
        leader.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


def mounts_under(directory: Path) -> list[str]:
    """The mount points under `directory` (servers' filesystems, the games' tmpfs)."""
    marker = str(directory).rstrip("/") + "/"
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line.split()[4] for line in lines if line.split()[4].startswith(marker)]


def unmount_under(directory: Path) -> None:
    """What an agent that was killed left mounted under its data directory, unmounted (deepest
    first): the loop devices of its servers' filesystems are released with them."""
    for point in sorted(mounts_under(directory), key=len, reverse=True):
        done = subprocess.run(["umount", point], capture_output=True, check=False)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
