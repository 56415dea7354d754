"""Withdrawn access pushed to the agents (the carrier of `gshost.withdrawals`), so an open
console socket ends within 2 s of the write that withdrew it (docs/console.md).

After commit, a `PendingWithdrawal` row is written for every agent node and the message is
pushed to each agent (`POST /v1/withdrawals`) from a small pool of threads, so the request
that withdrew never waits for a node. A push that fails is not retried by us: the row is
carried by the node's next heartbeat answer (every 10 s), and again by each one after, until
the agent lists it in `withdrawals_taken`, or for WITHDRAWAL_KEPT. The node's
`withdrawals_until` says when to look, so the heartbeats of other times read nothing. Every
agent node is told, not only those of the servers named: after a server's deletion or move, the
node it was on is no longer known from its row, and withdrawals are rare.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from django.utils import timezone

from gshost import process_state
from gshost.errors import DomainError
from gshost.withdrawals import Withdrawal
from gshost_agent.protocol import MAX_WITHDRAWALS_TAKEN
from servers.agents.runtime import agent_call
from servers.models import Node, NodeKind, PendingWithdrawal

logger = logging.getLogger(__name__)

WITHDRAWAL_KEPT = timedelta(minutes=10)
WITHDRAWALS_PATH = "/v1/withdrawals"
PUSHERS = 8

_pool: ThreadPoolExecutor | None = None


def _pushers() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=PUSHERS, thread_name_prefix="withdrawals")
    return _pool


def _reset() -> None:
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=False)
    _pool = None


process_state.register(
    "servers.agents.withdrawal_push",
    bound=f"a pool of {PUSHERS} threads pushing withdrawals to agents",
    reset=_reset,
)


def message_of(row: PendingWithdrawal) -> dict[str, Any]:
    return {"id": row.id, **row.message}


def withdrawal_push(withdrawal: Withdrawal) -> None:
    """Record the withdrawal for every agent node, then push it to each (after commit; the
    carrier `servers.apps` registers)."""
    nodes = list(Node.objects.filter(kind=NodeKind.AGENT).exclude(url=""))
    if not nodes:
        return
    rows = PendingWithdrawal.objects.bulk_create(
        [PendingWithdrawal(node=node, message=withdrawal.to_json()) for node in nodes]
    )
    until = timezone.now() + WITHDRAWAL_KEPT
    Node.objects.filter(id__in=[node.id for node in nodes]).update(withdrawals_until=until)
    for node, row in zip(nodes, rows, strict=True):
        _pushers().submit(_push, node, message_of(row))


def _push(node: Node, message: dict[str, Any]) -> None:
    try:
        agent_call(node, "POST", WITHDRAWALS_PATH, message)
    except DomainError as error:  # its next heartbeat's answer carries it
        logger.info("Node %s: withdrawal %s not pushed (%s)", node.name, message["id"], error)
    except Exception:
        logger.exception("Node %s: withdrawal %s not pushed", node.name, message["id"])


def withdrawals_pending(*, node: Node, taken: list[int]) -> list[dict[str, Any]]:
    """What the node still has to hold: rows it has not listed as taken, recent enough to
    matter (the taken ones and the older ones are deleted). One indexed read when there is
    nothing, as at almost every heartbeat."""
    rows = PendingWithdrawal.objects.filter(node=node)
    if taken:
        rows.filter(id__in=taken).delete()
    pending = list(rows.order_by("id")[:MAX_WITHDRAWALS_TAKEN])
    old = timezone.now() - WITHDRAWAL_KEPT
    if any(row.created_at < old for row in pending):
        rows.filter(created_at__lt=old).delete()
    return [message_of(row) for row in pending if row.created_at >= old]
