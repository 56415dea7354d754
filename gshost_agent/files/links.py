"""Single-use links for a download or an upload that go straight to the node: a random token
in the URL, kept (hashed) in memory for 15 minutes and taken by its first use. An agent that
restarts forgets its links: the control plane makes new ones. Given the agent's record of
withdrawals, a link made before one that covers its server is refused."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gshost_agent.withdrawals import Withdrawals

LINK_SECONDS = 15 * 60
MAX_LINKS = 100_000


@dataclass(frozen=True)
class Link:
    server_id: str
    kind: str  # download or upload
    path: str  # the file to download, or the directory uploads go to
    game: str
    disk_mb: int
    issued_at: float
    expires_at: float


class FileLinks:
    def __init__(
        self, *, withdrawals: Withdrawals | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.clock, self.withdrawals = clock, withdrawals
        self._links: dict[str, Link] = {}
        self._lock = threading.Lock()

    def issue(
        self, server_id: str, kind: str, path: str, game: str, disk_mb: int
    ) -> tuple[str, Link]:
        now = self.clock()
        link = Link(server_id, kind, path, game, disk_mb, now, now + LINK_SECONDS)
        token = secrets.token_urlsafe(32)
        with self._lock:
            for key in [key for key, kept in self._links.items() if kept.expires_at <= now]:
                del self._links[key]
            if len(self._links) >= MAX_LINKS:
                oldest = min(self._links, key=lambda key: self._links[key].issued_at)
                del self._links[oldest]
            self._links[_digest(token)] = link
        return token, link

    def take(self, token: str, kind: str) -> Link | None:
        """The link, used up; None when unknown, used, expired or of the other kind."""
        with self._lock:
            link = self._links.get(_digest(token))
            if link is None or link.kind != kind:
                return None
            del self._links[_digest(token)]
        if link.expires_at <= self.clock():
            return None
        # A server suspended, deleted or moved since the link was made: refused.
        if self.withdrawals is not None and self.withdrawals.refuses(
            server_id=link.server_id, issued_at=link.issued_at
        ):
            return None
        return link


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()
