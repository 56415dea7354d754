"""Taking access away from what is already open: console sockets and SFTP sessions on nodes.

Every write that withdraws access calls `withdraw_access` inside its transaction: a key
revoked or expired (rotation with grace 0 included), a membership or scope removed, a
password changed or a factor removed, a server suspended, deleted or moved. After commit,
every carrier registered with `on_access_withdrawn` is given the `Withdrawal`; the carrier
that pushes it to the nodes (servers/agents) is one. A carrier must not raise into the write:
a failing carrier is logged and the others still run. What the message means is defined with
it in `gshost_agent.withdrawals`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from django.db import transaction

from gshost_agent.withdrawals import Withdrawal

__all__ = ["Withdrawal", "on_access_withdrawn", "withdraw_access"]

logger = logging.getLogger(__name__)

Carrier = Callable[[Withdrawal], None]
# Registered once at start-up (an app's `ready()`); never cleared while the process runs.
_carriers: list[Carrier] = []


def on_access_withdrawn(carrier: Carrier) -> Carrier:
    """Register `carrier` to be given every withdrawal after commit (usable as a decorator)."""
    if carrier not in _carriers:
        _carriers.append(carrier)
    return carrier


def withdraw_access(
    *,
    reason: str,
    server_ids: Iterable[str] = (),
    key_ids: Iterable[str] = (),
    person_ids: Iterable[int | str] = (),
) -> Withdrawal:
    """Withdraw access once the current transaction commits (at once outside of one)."""
    withdrawal = Withdrawal(
        reason=reason,
        server_ids=frozenset(server_ids),
        key_ids=frozenset(key_ids),
        person_ids=frozenset(str(person) for person in person_ids),
    )
    transaction.on_commit(lambda: _tell_carriers(withdrawal))
    return withdrawal


def _tell_carriers(withdrawal: Withdrawal) -> None:
    for carrier in list(_carriers):
        try:
            carrier(withdrawal)
        except Exception:
            logger.exception("An access-withdrawal carrier failed: %r", carrier)
