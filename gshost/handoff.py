"""Hand-offs after commit that must never fail the request that committed.

A committed action (a power action, a published event) may queue a task "look at row N now".
The rows are the truth; the task only saves waiting. So when the broker cannot be reached the
hand-off is logged and counted, and nothing is raised into the caller: a timer that reads the
rows (the delivery engine's timer, which also runs the catch-ups apps register here) does the
work instead once it comes round.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Final

from django.db import transaction

logger = logging.getLogger(__name__)

# Run now and then by the delivery engine's timer in every worker process: each finishes, from
# the rows, work whose hand-off task was lost (never queued, or queued and dropped). Apps add
# theirs in ready() with register_catch_up; the core names none of them.
_catch_ups: Final[list[Callable[[], object]]] = []

_lock = threading.Lock()
_failed = 0  # hand-offs this process could not queue since it started (or since reset)


def after_commit(enqueue: Callable[..., object], *args: object) -> None:
    """Call ``enqueue(*args)`` (e.g. django-q2's ``async_task``) once the transaction commits;
    a failure is logged and counted, never raised."""
    transaction.on_commit(lambda: queue_now(enqueue, *args))


def queue_now(enqueue: Callable[..., object], *args: object) -> bool:
    """``enqueue(*args)`` now; False (logged, counted) when it failed."""
    global _failed
    try:
        enqueue(*args)
    except Exception:
        with _lock:
            _failed += 1
        logger.warning(
            "Could not queue %s; the rows are kept and a timer picks them up",
            args[0] if args else enqueue,
            exc_info=True,
        )
        return False
    return True


def failed_count() -> int:
    with _lock:
        return _failed


def reset() -> None:
    """Forget the count (tests)."""
    global _failed
    with _lock:
        _failed = 0


def register_catch_up(catch_up: Callable[[], object]) -> None:
    """Have the workers' timer call ``catch_up`` now and then (once, however often asked)."""
    with _lock:
        if catch_up not in _catch_ups:
            _catch_ups.append(catch_up)


def catch_ups() -> list[Callable[[], object]]:
    with _lock:
        return list(_catch_ups)


def run_catch_ups() -> None:
    """Run each registered catch-up; one failing does not stop the others."""
    for catch_up in catch_ups():
        try:
            catch_up()
        except Exception:
            logger.exception("Catch-up %s failed", getattr(catch_up, "__qualname__", catch_up))
