"""One uid (and the gid of the same number) per server, so that what the kernel keeps per user
(keyrings, inotify instances, message queues, process counts) is the server's own.

Ids are claimed in one registry per machine, as network slots are (gshost_agent.netns): a file
`<id>.json` naming the server's directory, made with O_EXCL under one lock, so agents on one
machine (each with its own data directory) never hand out the same id. Unlike slots, the
registry lasts across reboots (/var/lib, not /run): the files a server's game wrote outlive
its processes, and its id stays its own while its directory exists. It is released when the
server is deleted from the node (or moved off it); an entry whose directory is gone is free.
Ids that /etc/passwd or /etc/group name are never handed out.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import json
import os
import pwd
from collections.abc import Iterator
from pathlib import Path

REGISTRY = Path("/var/lib/gshost-sandbox/ids")
FIRST_ID = 300_000  # above the server groups of earlier agents (270000..279999)
ID_COUNT = 60_000


class NoServerIdLeft(RuntimeError):
    """Every id of the range is held by a server directory on this machine."""


class ServerIds:
    def __init__(self, root: Path = REGISTRY) -> None:
        self.root = root

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        descriptor = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    def claim(self, server_dir: Path, prefer: int | None = None) -> int:
        """The id of the server whose directory is `server_dir`: the one it holds, else
        `prefer` when free, else the lowest free one."""
        wanted = str(server_dir)
        with self.locked():
            entries = self._entries()
            for number, held in entries.items():
                if held == wanted:
                    return number
            candidates = [prefer] if prefer is not None and in_range(prefer) else []
            for number in [*candidates, *range(FIRST_ID, FIRST_ID + ID_COUNT)]:
                if _free(number, entries) and self._take(number, wanted):
                    return number
        raise NoServerIdLeft(f"no server id left in {FIRST_ID}..{FIRST_ID + ID_COUNT - 1}")

    def id_of(self, server_dir: Path) -> int | None:
        """The id claimed for `server_dir`, if any."""
        with self.locked():
            for number, held in self._entries().items():
                if held == str(server_dir):
                    return number
        return None

    def release(self, server_dir: Path) -> None:
        with self.locked():
            for number, held in self._entries().items():
                if held == str(server_dir):
                    with contextlib.suppress(FileNotFoundError):
                        (self.root / f"{number}.json").unlink()

    def _entries(self) -> dict[int, str]:
        """Each claimed id and the directory it was claimed for."""
        found: dict[int, str] = {}
        for path in self.root.iterdir():
            if path.suffix == ".json" and path.stem.isdigit():
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                    found[int(path.stem)] = str(json.loads(path.read_text())["server_dir"])
        return found

    def _take(self, number: int, server_dir: str) -> bool:
        path = self.root / f"{number}.json"
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a stale entry: its directory is gone
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "w") as file:
            json.dump({"server_dir": server_dir}, file)
        return True


def in_range(number: int) -> bool:
    return FIRST_ID <= number < FIRST_ID + ID_COUNT


def _free(number: int, entries: dict[int, str]) -> bool:
    held = entries.get(number)
    if held is not None and os.path.lexists(held):
        return False
    try:
        pwd.getpwuid(number)
        return False
    except KeyError:
        pass
    try:
        grp.getgrgid(number)
        return False
    except KeyError:
        return True
