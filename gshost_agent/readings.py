"""Readings of a real game process: its whole process tree's CPU and memory (psutil), its
directory's size, 24 h of samples kept on disk (one bounded file per server), and which of their
per-minute means the control plane has not acknowledged yet (sent in the heartbeat)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from gshost_agent.protocol import MAX_MINUTES_IN_READING, MINUTE_SECONDS, Minute, moment_of

SAMPLE_SECONDS = 10
KEEP_SECONDS = 24 * 3600
KEPT_SAMPLES = KEEP_SECONDS // SAMPLE_SECONDS
DISK_WALK_LIMIT = 100_000  # entries; a directory beyond that is reported as far as counted


CHILDREN_FRESH_SECONDS = 1.0


class _Children:
    """The machine's processes by parent, read at most once a second and shared by every
    server's tree: finding a tree's members walks all of /proc, so a read per server made the
    node's cost at rest grow with servers times processes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_at = -CHILDREN_FRESH_SECONDS
        self._by_parent: dict[int, list[int]] = {}

    def descendants(self, pid: int) -> list[int]:
        with self._lock:
            if time.monotonic() - self._read_at >= CHILDREN_FRESH_SECONDS:
                self._by_parent, self._read_at = _by_parent(), time.monotonic()
            by_parent = self._by_parent
        found, pending = [], [pid]
        while pending:
            children = by_parent.get(pending.pop(), [])
            found.extend(children)
            pending.extend(children)
        return found


CHILDREN = _Children()


def _by_parent() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry.name}/stat", "rb") as file:
                    fields = file.read().rpartition(b")")[2].split()
                found.setdefault(int(fields[1]), []).append(int(entry.name))
    return found


class ProcessTree:
    """CPU is measured between two calls: the psutil objects are kept from one to the next."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._known: dict[int, psutil.Process] = {}

    def usage(self) -> tuple[float, float]:
        """(cpu_percent, memory_mb) of the process and every descendant; zeros once gone."""
        try:
            root = self._process(self.pid)
            if not root.is_running():
                return 0.0, 0.0
        except psutil.Error:
            return 0.0, 0.0
        cpu = 0.0
        memory = 0
        alive = set()
        for pid in [self.pid, *CHILDREN.descendants(self.pid)]:
            with contextlib.suppress(psutil.Error):
                process = self._process(pid)
                cpu += process.cpu_percent(None)
                memory += process.memory_info().rss
                alive.add(pid)
        self._known = {pid: process for pid, process in self._known.items() if pid in alive}
        return round(cpu, 1), round(memory / (1 << 20), 1)

    def _process(self, pid: int) -> psutil.Process:
        if pid not in self._known:
            self._known[pid] = psutil.Process(pid)
        return self._known[pid]


def disk_mb(directory: Path) -> float:
    """The size of the files under `directory`, symbolic links not followed."""
    total = 0
    seen = 0
    pending = [str(directory)]
    while pending and seen < DISK_WALK_LIMIT:
        with contextlib.suppress(OSError), os.scandir(pending.pop()) as entries:
            for entry in entries:
                seen += 1
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
    return round(total / (1 << 20), 2)


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the epoch
    cpu_percent: float
    memory_mb: float
    players_online: int


class SampleStore:
    """Samples of one server: in memory (24 h at most) and appended to a file that is rewritten
    to the last 24 h whenever it holds twice that."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.samples: deque[Sample] = deque(maxlen=KEPT_SAMPLES)
        self._lines_in_file = 0
        self._load()

    def _load(self) -> None:
        cutoff = time.time() - KEEP_SECONDS
        with contextlib.suppress(OSError), open(self.path, encoding="utf-8") as file:
            for line in file:
                self._lines_in_file += 1
                with contextlib.suppress(ValueError, TypeError):
                    sample = Sample(**json.loads(line))
                    if sample.at >= cutoff:
                        self.samples.append(sample)

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)
        if self._lines_in_file >= 2 * KEPT_SAMPLES:
            self._rewrite()
            return
        with open(self.path, "a", encoding="utf-8") as file:
            file.write(json.dumps(asdict(sample)) + "\n")
        self._lines_in_file += 1

    def _rewrite(self) -> None:
        temporary = self.path.with_name(self.path.name + ".tmp")
        with open(temporary, "w", encoding="utf-8") as file:
            file.writelines(json.dumps(asdict(sample)) + "\n" for sample in self.samples)
        os.replace(temporary, self.path)
        self._lines_in_file = len(self.samples)

    def between(self, start: float, end: float, step: int) -> list[Sample]:
        """One sample per `step` seconds from `start` to `end`: the mean of the samples in it.
        Read from the newest back (samples are added in the order they are taken), so a
        recent window costs only its own samples."""
        buckets: dict[int, list[Sample]] = {}
        for sample in reversed(self.samples):
            if sample.at < start:
                break
            if sample.at <= end:
                buckets.setdefault(int((sample.at - start) // step), []).append(sample)
        return [
            Sample(
                at=start + index * step,
                cpu_percent=round(sum(s.cpu_percent for s in group) / len(group), 1),
                memory_mb=round(sum(s.memory_mb for s in group) / len(group), 1),
                players_online=round(sum(s.players_online for s in group) / len(group)),
            )
            for index, group in sorted(buckets.items())
        ]


@dataclass(frozen=True)
class PendingMinutes:
    """What one heartbeat carries: per server, its completed minutes not acknowledged yet."""

    until: float  # the start of the minute under way when they were read: all before it are done
    servers: tuple[str, ...]  # every server read, with or without minutes to send
    minutes: dict[str, list[Minute]]


class UnsentMinutes:
    """Per server, the end of the minutes the control plane acknowledged (a heartbeat answered
    200). Kept in memory only: after an agent start the last MAX_MINUTES_IN_READING completed
    minutes are sent again, and the control plane ignores those it has. Nothing older than that
    is ever sent, so a node back after a cut link sends the last hour of it."""

    def __init__(self) -> None:
        self._acknowledged_until: dict[str, float] = {}

    def pending(self, stores: dict[str, SampleStore], now: float) -> PendingMinutes:
        until = now // MINUTE_SECONDS * MINUTE_SECONDS
        earliest = until - MAX_MINUTES_IN_READING * MINUTE_SECONDS
        minutes: dict[str, list[Minute]] = {}
        for server_id, store in stores.items():
            since = max(self._acknowledged_until.get(server_id, earliest), earliest)
            if since >= until:
                continue  # five heartbeats in six: no minute completed since the last one
            means = store.between(since, until, MINUTE_SECONDS)
            completed = [_minute(mean) for mean in means if mean.at < until]
            if completed:
                minutes[server_id] = completed
        return PendingMinutes(until, tuple(stores), minutes)

    def acknowledge(self, pending: PendingMinutes) -> None:
        """The control plane has them: they are not sent again. Servers the node no longer
        knows are forgotten here too."""
        self._acknowledged_until = dict.fromkeys(pending.servers, pending.until)


def _minute(mean: Sample) -> Minute:
    return Minute(moment_of(mean.at), mean.cpu_percent, mean.memory_mb, mean.players_online)
