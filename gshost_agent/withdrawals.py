"""Withdrawn access: the message that ends open console sockets and SFTP sessions on a node.

The control plane sends a `Withdrawal` to the agents concerned when access is taken away: a
key revoked or expired, a person's membership or scope removed, a password changed, a server
suspended, deleted or moved. A withdrawal names servers, subjects (keys, people), or both:
it covers a session when the session's server is among `server_ids` (or none are named) and
its subject is among `key_ids` or `person_ids` (or neither is named). So a membership removed
is the organization's servers and the person; a password change is the person alone; a
suspension is the server alone.

`Withdrawals` is the agent's record of them. Whatever holds a session open (a console socket,
an SFTP session) subscribes and closes what a new withdrawal covers; a credential issued at or
before a withdrawal that covers it is refused from then on.

Standard library only: the agent imports no Django.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

# How long a withdrawal is kept to refuse credentials issued before it. The longest-lived
# credential it refuses is a console token (5 minutes); a day leaves room for clock skew.
KEPT_SECONDS = 24 * 3600
MAX_IDS = 10_000


class WithdrawalInvalid(ValueError):
    """A withdrawal message that is not one (its text says why)."""


def _ids(body: dict[str, Any], name: str) -> frozenset[str]:
    value = body.get(name, [])
    if not isinstance(value, list) or len(value) > MAX_IDS:
        raise WithdrawalInvalid(f"{name} must be a list of at most {MAX_IDS} ids")
    if not all(isinstance(item, str | int) and not isinstance(item, bool) for item in value):
        raise WithdrawalInvalid(f"{name} must hold ids")
    return frozenset(str(item) for item in value)


@dataclass(frozen=True)
class Withdrawal:
    reason: str
    server_ids: frozenset[str] = frozenset()
    key_ids: frozenset[str] = frozenset()
    person_ids: frozenset[str] = frozenset()  # the person's user id, as text
    at: float = field(default_factory=time.time)  # seconds since the epoch

    def __post_init__(self) -> None:
        if not (self.server_ids or self.key_ids or self.person_ids):
            raise WithdrawalInvalid("a withdrawal names servers, keys or people")

    def covers(
        self, *, server_id: str, key_id: str | None = None, person_id: str | int | None = None
    ) -> bool:
        """Whether a session on `server_id`, opened with `key_id` or by `person_id`, ends."""
        if self.server_ids and server_id not in self.server_ids:
            return False
        if not (self.key_ids or self.person_ids):
            return True
        return (key_id is not None and key_id in self.key_ids) or (
            person_id is not None and str(person_id) in self.person_ids
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "server_ids": sorted(self.server_ids),
            "key_ids": sorted(self.key_ids),
            "person_ids": sorted(self.person_ids),
            "at": self.at,
        }

    @classmethod
    def from_json(cls, body: Any) -> Withdrawal:
        if not isinstance(body, dict):
            raise WithdrawalInvalid("a withdrawal is a JSON object")
        reason, at = body.get("reason"), body.get("at", time.time())
        if not isinstance(reason, str) or not 0 < len(reason) <= 200:
            raise WithdrawalInvalid("reason must be a short text")
        if not isinstance(at, int | float) or isinstance(at, bool):
            raise WithdrawalInvalid("at must be seconds since the epoch")
        return cls(
            reason=reason,
            server_ids=_ids(body, "server_ids"),
            key_ids=_ids(body, "key_ids"),
            person_ids=_ids(body, "person_ids"),
            at=float(at),
        )


Listener = Callable[[Withdrawal], None]


class Withdrawals:
    """The withdrawals this agent was told of in the last KEPT_SECONDS, and who to tell."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._kept: list[Withdrawal] = []
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` with every withdrawal added from now on; returns the unsubscribe.
        Listeners run on the caller's thread and must not block (schedule work instead)."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def add(self, withdrawal: Withdrawal) -> None:
        with self._lock:
            cutoff = self._clock() - KEPT_SECONDS
            self._kept = [kept for kept in self._kept if kept.at > cutoff]
            self._kept.append(withdrawal)
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(withdrawal)
            except Exception:
                logger.exception("A withdrawal listener failed: %r", listener)

    def add_all(self, withdrawals: Iterable[Withdrawal]) -> None:
        for withdrawal in withdrawals:
            self.add(withdrawal)

    def refuses(
        self,
        *,
        server_id: str,
        issued_at: float,
        key_id: str | None = None,
        person_id: str | int | None = None,
    ) -> bool:
        """Whether a credential issued at `issued_at` for this server and subject is refused:
        a withdrawal that covers it came at or after its issue."""
        with self._lock:
            kept = list(self._kept)
        return any(
            withdrawal.at >= issued_at
            and withdrawal.covers(server_id=server_id, key_id=key_id, person_id=person_id)
            for withdrawal in kept
        )
