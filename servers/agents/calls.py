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

The marks live in Redis, which every web process shares, when REDIS_URL is set; each process
keeps its own otherwise, and while Redis cannot be reached (a call to a node never fails
because of Redis: 0.5 s timeouts, then the process's own marks). Long calls (a transfer's
upload, minutes) take no slot.
"""

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from functools import cache

import redis
from django.conf import settings

from gshost import process_state
from servers.errors import NodeUnavailable
from servers.models import Node

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 3.0
DEADLINE_SECONDS = 10.0
FAIL_FAST_SECONDS = 30.0
SLOW_AFTER_SECONDS = 1.0
CALLS_AT_ONCE = 1
_POLL_SECONDS = 0.01
_SLOT_MARGIN_SECONDS = 5.0  # a slot whose process died is free this long after its deadline
_REDIS_TIMEOUT_SECONDS = 0.5
_LOCAL_KEPT = 10_000


class _LocalMarks:
    """The process's own marks: key -> (value, expires at, time.time())."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[str, tuple[str, float]] = {}

    def get(self, key: str) -> str | None:
        with self._lock:
            found = self._marks.get(key)
            if found is None or found[1] <= time.time():
                self._marks.pop(key, None)
                return None
            return found[0]

    def set(self, key: str, value: str, ttl: float, *, only_new: bool = False) -> bool:
        now = time.time()
        with self._lock:
            found = self._marks.get(key)
            if only_new and found is not None and found[1] > now:
                return False
            if len(self._marks) >= _LOCAL_KEPT:
                self._marks = {k: v for k, v in self._marks.items() if v[1] > now}
            self._marks[key] = (value, now + ttl)
            return True

    def delete(self, key: str, value: str) -> None:
        with self._lock:
            if (found := self._marks.get(key)) is not None and found[0] == value:
                del self._marks[key]

    def clear(self) -> None:
        with self._lock:
            self._marks.clear()


_local = _LocalMarks()
process_state.register(
    "servers.agents.calls",
    bound=f"marks of failing nodes and calls under way, at most {_LOCAL_KEPT:,} (expired "
    "ones dropped), used without Redis",
    reset=_local.clear,
)


@cache
def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=_REDIS_TIMEOUT_SECONDS,
        socket_timeout=_REDIS_TIMEOUT_SECONDS,
    )


class _Marks:
    """Redis when it is set and answers, else the process's own marks."""

    def _shared(self) -> redis.Redis | None:
        return _redis(settings.REDIS_URL) if settings.REDIS_URL else None

    def get(self, key: str) -> str | None:
        shared = self._shared()
        if shared is not None:
            try:
                found = shared.get(key)
                return found.decode() if isinstance(found, bytes) else found
            except (redis.RedisError, OSError):
                logger.warning("Node call marks: Redis unavailable, using this process's")
        return _local.get(key)

    def set(self, key: str, value: str, ttl: float, *, only_new: bool = False) -> bool:
        shared = self._shared()
        if shared is not None:
            try:
                return bool(shared.set(key, value, px=int(ttl * 1000), nx=only_new))
            except (redis.RedisError, OSError):
                logger.warning("Node call marks: Redis unavailable, using this process's")
        return _local.set(key, value, ttl, only_new=only_new)

    def delete(self, key: str, value: str) -> None:
        shared = self._shared()
        if shared is not None:
            try:
                if self.get(key) == value:
                    shared.delete(key)
                return
            except (redis.RedisError, OSError):
                logger.warning("Node call marks: Redis unavailable, using this process's")
        _local.delete(key, value)


_marks = _Marks()


def _failing_key(node: Node) -> str:
    return f"gshost:nodecalls:{node.id}:failing"


def _slot_key(node: Node, slot: int) -> str:
    return f"gshost:nodecalls:{node.id}:slot:{slot}"


@dataclass(frozen=True)
class Slot:
    key: str
    value: str  # when it was taken, and by whom


def node_failing_until(node: Node) -> float | None:
    """When calls to the node are tried again (a time.time()), or None: not failing."""
    found = _marks.get(_failing_key(node))
    until = float(found) if found else None
    return until if until is not None and until > time.time() else None


def node_mark_failing(node: Node) -> None:
    """The agent could not be reached: calls to it answer at once for FAIL_FAST_SECONDS."""
    until = time.time() + FAIL_FAST_SECONDS
    _marks.set(_failing_key(node), repr(until), FAIL_FAST_SECONDS + 1)


def node_call_begin(node: Node, *, deadline: float, takes_slot: bool = True) -> Slot | None:
    """Raise NodeUnavailable at once when the node is failing or a call to it is slow; else
    the slot this call holds until `node_call_end` (None for a call that takes none)."""
    _refuse_if_failing(node)
    if not takes_slot:
        return None
    holder = uuid.uuid4().hex
    while True:
        now = time.time()
        value = f"{now!r} {holder}"
        for slot in range(CALLS_AT_ONCE):
            key = _slot_key(node, slot)
            if _marks.set(key, value, deadline + _SLOT_MARGIN_SECONDS, only_new=True):
                return Slot(key, value)
        held = [_marks.get(_slot_key(node, slot)) for slot in range(CALLS_AT_ONCE)]
        oldest = min((float(h.split()[0]) for h in held if h), default=now)
        if now - oldest > SLOW_AFTER_SECONDS:
            waited = int(now - oldest)
            raise NodeUnavailable(node.name, f"a call to its agent has waited {waited} s")
        _refuse_if_failing(node)  # the holder may have just failed
        time.sleep(_POLL_SECONDS)


def node_call_end(slot: Slot | None) -> None:
    if slot is not None:
        _marks.delete(slot.key, slot.value)


def _refuse_if_failing(node: Node) -> None:
    until = node_failing_until(node)
    if until is not None:
        wait = max(1, round(until - time.time()))
        raise NodeUnavailable(node.name, f"its agent did not answer; tried again in {wait} s")
