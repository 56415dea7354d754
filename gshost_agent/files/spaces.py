"""Each server's files as a Jail: its directory (made, with its filesystem, when it has none
yet, so files can be uploaded before a first start), its game user and its template's
denylist; the room its disk has left; and the per-server pull limit."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from gshost_agent import readings
from gshost_agent.disks import mounted
from gshost_agent.files.jail import Jail
from gshost_agent.files.links import FileLinks
from gshost_agent.files.pull import Addresses
from gshost_agent.layout import Layout
from gshost_agent.templates import GameCatalog
from gshost_agent.withdrawals import Withdrawals

PULLS_PER_WINDOW = 10
PULL_WINDOW_SECONDS = 300
MIB = 1 << 20


class FileSpaces:
    def __init__(
        self,
        layout: Layout,
        catalog: GameCatalog,
        allowed_networks: tuple[str, ...] = (),
        *,
        withdrawals: Withdrawals | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.layout, self.catalog, self.clock = layout, catalog, clock
        self.addresses = Addresses(allowed_networks)
        self.links = FileLinks(withdrawals=withdrawals)
        self._pulls: dict[str, collections.deque[float]] = collections.defaultdict(
            collections.deque
        )
        self._lock = threading.Lock()

    def jail(self, server_id: str, game: str, disk_mb: int) -> Jail:
        """The server's files (blocking: run it in a thread). UnknownGame for a game the node
        has no template of."""
        template = self.catalog.get(game)
        directory = self.layout.server_dir(server_id)
        ready = directory.is_dir() and (self.layout.disks is None or mounted(directory))
        if ready and self.layout.identity.privileged:
            number: int | None = directory.stat().st_gid  # prepare_server gave it the id
        else:
            number = self.layout.prepare_server(server_id, disk_mb)
        return Jail(
            self.layout.server_dir(server_id),
            uid=number,
            gid=number,
            denylist=template.file_denylist,
        )

    def room_bytes(self, server_id: str, jail: Jail, disk_mb: int) -> int:
        """What may still be written: the filesystem's own free space where the server has one,
        else its plan less a walk of its directory (blocking)."""
        directory = self.layout.server_dir(server_id)
        if self.layout.disks is not None and mounted(directory):
            return jail.free_bytes()
        return disk_mb * MIB - int(readings.disk_mb(directory) * MIB)

    def pull_wait(self, server_id: str) -> int:
        """0 when the server may pull now (the pull is counted), else the seconds to wait."""
        now = self.clock()
        with self._lock:
            recent = self._pulls[server_id]
            while recent and recent[0] <= now - PULL_WINDOW_SECONDS:
                recent.popleft()
            if len(recent) >= PULLS_PER_WINDOW:
                return max(1, int(recent[0] + PULL_WINDOW_SECONDS - now) + 1)
            recent.append(now)
            return 0
