"""How the engine rides on django-q2's processes: started with each worker, stopped in order
whether SIGTERM reaches the cluster's main process only or its whole process group.

django-q2 stops in order when its main process gets SIGTERM or SIGINT: the sentinel (its
supervisor process) tells the workers to leave their task loops, and each worker's engine then
stops (see ``engine``). Sent to the whole process group (systemd's default), SIGTERM would also
reach the sentinel, whose default action kills it mid-wait; the main process then hangs for
ever in ``stop_event.set()`` waiting for the dead sleeper. So the cluster's main process keeps
SIGTERM blocked in the children it forks (a signal mask is inherited across fork; django-q2's
``signal.signal`` calls do not change it): the sentinel, its pusher and its monitor stop when
the sentinel says so, and each worker unblocks SIGTERM at ``post_spawn`` and leaves its task
loop when it arrives. Only public interfaces: ``signal.pthread_sigmask``,
``os.register_at_fork`` and django-q2's ``post_spawn`` signal. The group-SIGTERM end-to-end test
fails if this stops working.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

_SHIELDED = {signal.SIGTERM}


def shield_cluster_children(argv: Sequence[str]) -> None:
    """In the main process of ``manage.py qcluster``: fork children with SIGTERM blocked."""
    if list(argv[1:2]) != ["qcluster"]:
        return
    main_pid = os.getpid()

    def before_fork() -> None:
        if os.getpid() == main_pid:
            signal.pthread_sigmask(signal.SIG_BLOCK, _SHIELDED)

    def after_fork_in_parent() -> None:
        if os.getpid() == main_pid:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _SHIELDED)

    os.register_at_fork(before=before_fork, after_in_parent=after_fork_in_parent)


def start_in_worker(**_signal_kwargs: Any) -> None:
    """django-q2's ``post_spawn`` receiver: start the engine with the worker process, and let
    SIGTERM end the worker's task loop (after which the engine stops in order)."""
    from webhooks.delivery.engine import get_engine

    get_engine(catch_ups=True)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _leave_task_loop)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SHIELDED)


def _leave_task_loop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)  # the engine's timer sees the main thread end and stops in order
