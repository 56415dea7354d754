"""Hand-offs after commit that must never fail the request that committed.

A committed action (a power action, a published event) may queue a task "look at row N now".
The rows are the truth; the task only saves waiting. So when the broker cannot be reached the
hand-off is logged and counted, and nothing is raised into the caller: whatever reads the rows
on its own (the delivery engine's senders, the servers' catch-up thread) does the work instead.

The other side of the same rule: a call to another machine (an agent, the bucket, a webhook's
receiver) is made after commit, never inside a transaction. Each such edge calls
``require_outside_transaction`` first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import connections, transaction

from gshost.errors import CalledInsideTransaction
from gshost.monitoring.metrics import HANDOFFS_FAILED

logger = logging.getLogger(__name__)


def after_commit(enqueue: Callable[..., object], *args: object) -> None:
    """Call ``enqueue(*args)`` (e.g. django-q2's ``async_task``) once the transaction commits;
    a failure is logged and counted, never raised."""
    transaction.on_commit(lambda: queue_now(enqueue, *args))


def queue_now(enqueue: Callable[..., object], *args: object) -> bool:
    """``enqueue(*args)`` now; False (logged, counted in ``gshost_handoffs_failed_total``) when
    it failed. One line, no traceback: an outage refuses every hand-off the same way."""
    task = str(args[0]) if args else getattr(enqueue, "__name__", "?")
    try:
        enqueue(*args)
    except Exception as error:
        HANDOFFS_FAILED.labels(task=task).inc()
        logger.warning(
            "Could not queue %s (%s); the rows are kept and are picked up without it", task, error
        )
        return False
    return True


def require_outside_transaction(what: str) -> None:
    """Refuse `what` (a call to another machine) with CalledInsideTransaction when this thread
    is inside ``transaction.atomic`` on any database alias it has opened.

    A test case's own wrapping blocks do not count: Django's TestCase (and so pytest-django's
    ``db`` fixture) marks each block it opens with ``_from_testcase``, the mark Django itself
    reads to let ``atomic(durable=True)`` run inside a test. A block the code under test opens
    is never marked, so the same call is refused in a test as in production."""
    for connection in connections.all(initialized_only=True):
        opened = [b for b in connection.atomic_blocks if not getattr(b, "_from_testcase", False)]
        if opened:
            raise CalledInsideTransaction(
                f"{what} was called inside a transaction (database {connection.alias!r}): "
                "call it after commit (transaction.on_commit, or once the atomic block ends)."
            )
