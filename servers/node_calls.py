"""How long a call to a node's agent may take, and which calls are not even tried.

Three rules keep one slow or silent node from costing anything to callers about servers on
other nodes (docs/nodes.md, "When a node does not answer"):

- A deadline: 3 s to connect (TCP and TLS), 10 s in all, the answer read included.
- Fail fast: a call that could not reach the agent (refused, timed out, TLS broken) marks the
  node `failing` for FAIL_FAST_SECONDS. Calls to a failing node answer NodeUnavailable at once,
  without a connection; the first call after the window tries the node again.
- One call at a time per node (CALLS_AT_ONCE), across every web process: a caller waits for
  the node's slot while the call holding it is younger than SLOW_AFTER_SECONDS (a healthy
  agent answers in milliseconds) and gives up at once when it is older. So a node that takes
  connections and never answers holds one caller for the deadline, and every other caller
  about it for at most SLOW_AFTER_SECONDS.

The marks live in Django's cache, which every web process shares when REDIS_URL is set (each
process keeps its own otherwise). Long calls (a transfer's upload, minutes) take no slot.
"""

import time
import uuid
from dataclasses import dataclass

from django.core.cache import cache

from servers.errors import NodeUnavailable
from servers.models import Node

CONNECT_TIMEOUT_SECONDS = 3.0
DEADLINE_SECONDS = 10.0
FAIL_FAST_SECONDS = 30.0
SLOW_AFTER_SECONDS = 1.0
CALLS_AT_ONCE = 1
_POLL_SECONDS = 0.01
_SLOT_MARGIN_SECONDS = 5.0  # a slot whose process died is free this long after its deadline


def _failing_key(node: Node) -> str:
    return f"nodecalls:{node.id}:failing"


def _slot_key(node: Node, slot: int) -> str:
    return f"nodecalls:{node.id}:slot:{slot}"


@dataclass(frozen=True)
class Slot:
    key: str
    holder: str


def node_failing_until(node: Node) -> float | None:
    """When calls to the node are tried again (a time.time()), or None: not failing."""
    until = cache.get(_failing_key(node))
    return until if isinstance(until, float) and until > time.time() else None


def node_mark_failing(node: Node) -> None:
    """The agent could not be reached: calls to it answer at once for FAIL_FAST_SECONDS."""
    until = time.time() + FAIL_FAST_SECONDS
    cache.set(_failing_key(node), until, timeout=FAIL_FAST_SECONDS + 1)


def node_call_begin(node: Node, *, deadline: float, takes_slot: bool = True) -> Slot | None:
    """Raise NodeUnavailable at once when the node is failing or a call to it is slow; else
    the slot this call holds until `node_call_end` (None for a call that takes none)."""
    _refuse_if_failing(node)
    if not takes_slot:
        return None
    holder = uuid.uuid4().hex
    while True:
        now = time.time()
        for slot in range(CALLS_AT_ONCE):
            key = _slot_key(node, slot)
            if cache.add(key, (now, holder), timeout=deadline + _SLOT_MARGIN_SECONDS):
                return Slot(key, holder)
        held = [cache.get(_slot_key(node, slot)) for slot in range(CALLS_AT_ONCE)]
        oldest = min((started for started, _ in filter(None, held)), default=now)
        if now - oldest > SLOW_AFTER_SECONDS:
            waited = int(now - oldest)
            raise NodeUnavailable(node.name, f"a call to its agent has waited {waited} s")
        _refuse_if_failing(node)  # the holder may have just failed
        time.sleep(_POLL_SECONDS)


def node_call_end(slot: Slot | None) -> None:
    if slot is None:
        return
    held = cache.get(slot.key)
    if held is not None and held[1] == slot.holder:
        cache.delete(slot.key)


def _refuse_if_failing(node: Node) -> None:
    until = node_failing_until(node)
    if until is not None:
        wait = max(1, round(until - time.time()))
        raise NodeUnavailable(node.name, f"its agent did not answer; tried again in {wait} s")
