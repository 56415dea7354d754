"""The console output of servers on agent nodes, as the control plane last fetched it.

A server page shows its game's output live by asking, every 1.5 s, for the lines after the last
one it shows. That read never waits for the node: it is answered from the server's mirror in
the cache (Redis in production, shared by every web process). When the mirror is older than
FRESH_SECONDS, the read starts one refresh in the background (one per server at a time, across
web processes), which asks the agent for the lines after the mirror's last and adds them. So a
page sees the game's output one poll after its node has it, and a node that does not answer
costs a background thread (for the call's deadline, then nothing while it is marked failing),
never a page.
"""

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.cache import cache
from django.db import connections
from django.utils import timezone

from gshost import process_state
from servers.agents.calls import DEADLINE_SECONDS
from servers.agents.last_readings import CACHE_ERRORS
from servers.errors import NodeUnavailable
from servers.runtime import ConsoleLine, ConsoleLines

logger = logging.getLogger(__name__)

KEPT_LINES = 200  # the panel shows the last 200
FRESH_SECONDS = 1.0
REFRESHES_AT_ONCE = 4  # background calls per web process
MIRROR_TTL_SECONDS = 3600
_MIRROR = "gshost:console:"
_REFRESHING = "gshost:console-refreshing:"

# Lines the agent has after `after`, and the number of its last line; None when it has none
# (the game never ran there). Raises NodeUnavailable when the node does not answer.
FetchLines = Callable[[int], ConsoleLines | None]


@dataclass(frozen=True)
class Mirror:
    lines: tuple[tuple[int, str], ...]
    last: int
    fetched_at: datetime


def mirror_of(server_id: str) -> Mirror | None:
    try:
        found = cache.get(_MIRROR + server_id)
    except CACHE_ERRORS as error:
        logger.warning("Console not read: the cache is unavailable (%s)", type(error).__name__)
        return None
    return found if isinstance(found, Mirror) else None


def console_lines_mirrored(server_id: str, after: int, fetch: FetchLines) -> ConsoleLines:
    """The mirrored lines after line `after`, with the time they were fetched; a refresh
    started in the background when they are older than FRESH_SECONDS."""
    mirror = mirror_of(server_id)
    now = timezone.now()
    if mirror is None or now - mirror.fetched_at >= timedelta(seconds=FRESH_SECONDS):
        _refresh_soon(server_id, fetch)
    if mirror is None:
        return ConsoleLines([], after, as_of=None)
    lines = [ConsoleLine(n, text) for n, text in mirror.lines if n > after]
    return ConsoleLines(lines, max(after, mirror.last), as_of=mirror.fetched_at)


def console_mirror_refresh(server_id: str, fetch: FetchLines) -> Mirror | None:
    """Asks the agent for the lines after the mirror's last and keeps the newest KEPT_LINES.
    A node that started its line numbers again (a new agent) replaces the mirror."""
    mirror = mirror_of(server_id)
    after = mirror.last if mirror is not None else 0
    try:
        fetched = fetch(after)
    except NodeUnavailable:
        return None  # the page shows what it has, with its time; the node is marked failing
    kept = mirror.lines if mirror is not None else ()
    if fetched is None:
        fetched = ConsoleLines([], 0)
    if fetched.last < after:
        kept, after = (), 0
    new = tuple((line.n, line.text) for line in fetched.lines if line.n > after)
    last = max([after, *(n for n, _ in new)])
    updated = Mirror((kept + new)[-KEPT_LINES:], last, timezone.now())
    try:
        cache.set(_MIRROR + server_id, updated, MIRROR_TTL_SECONDS)
    except CACHE_ERRORS as error:
        logger.warning("Console not kept: the cache is unavailable (%s)", type(error).__name__)
    return updated


_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _background() -> ThreadPoolExecutor:
    """Made at first use, in the process that uses it (never before a fork)."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(REFRESHES_AT_ONCE, thread_name_prefix="console")
        return _executor


def _background_reset() -> None:
    """No new fetch starts on the pool; one under way ends within its call's deadline."""
    global _executor
    with _executor_lock:
        if _executor is not None:
            _executor.shutdown(wait=False, cancel_futures=True)
        _executor = None


process_state.register(
    "servers.agents.console_mirror",
    bound=f"a pool of at most {REFRESHES_AT_ONCE} threads, each fetch within the call's deadline",
    reset=_background_reset,
)


def _refresh_soon(server_id: str, fetch: FetchLines) -> None:
    """One refresh per server at a time: the first reader to take the mark starts it."""
    mark = _REFRESHING + server_id
    try:
        taken = cache.add(mark, True, timeout=int(DEADLINE_SECONDS) + 5)
    except CACHE_ERRORS:
        return
    if taken:
        _background().submit(_refresh_then_free, server_id, fetch, mark)


def _refresh_then_free(server_id: str, fetch: FetchLines, mark: str) -> None:
    try:
        console_mirror_refresh(server_id, fetch)
    except Exception:
        logger.exception("Console of %s: the refresh failed", server_id)
    finally:
        with contextlib.suppress(*CACHE_ERRORS):  # else it expires
            cache.delete(mark)
        connections.close_all()  # this thread's, if the call opened any
