"""Hand-offs after commit that must never fail the request that committed.

A committed action (a power action, a published event) may queue a task "look at row N now".
The rows are the truth; the task only saves waiting. So when the broker cannot be reached the
hand-off is logged and counted, and nothing is raised into the caller: whatever reads the rows
on its own (the delivery engine's senders, the servers' catch-up thread) does the work instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import transaction

logger = logging.getLogger(__name__)

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
            "Could not queue %s; the rows are kept and are picked up without it",
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
