"""How the engine rides on django-q2's processes: started with each worker, stopped in order
whether SIGTERM reaches the cluster's main process only or its whole process group.

django-q2 stops in order when its main process gets SIGTERM or SIGINT: the sentinel (its
supervisor process) stops the pusher, then queues one STOP per worker behind the tasks already
queued, and each worker leaves its task loop at its STOP (its engine then stops, see
``engine``). Only that path is orderly, so every other process of the cluster leaves SIGTERM to
it. Sent to the whole process group (systemd's default), SIGTERM would also reach:

- the sentinel, whose default action kills it mid-wait (the main process then hangs for ever
  in ``stop_event.set()``), and the pusher and monitor, which it would kill mid-task;
- the workers: one leaving its loop at once drops the tasks queued for it, and once all have
  left, the pusher blocks for ever putting a task into the full task queue while the sentinel
  waits for the pusher to stop, so the cluster never exits.

So the cluster's main process forks its children with SIGTERM blocked (a signal mask is
inherited across fork; django-q2's ``signal.signal`` calls do not change it). A worker keeps it
blocked and, at ``post_spawn``, starts a thread that takes each SIGTERM with its sender
(``signal.sigwaitinfo``): one from its parent (the sentinel ending a worker whose task timed
out, or a sentinel exiting with workers left) makes it leave its task loop at once; any other
(the group's) is left to the orderly stop. Only public interfaces: ``signal.pthread_sigmask``,
``signal.sigwaitinfo``, ``_thread.interrupt_main``, ``os.register_at_fork`` and django-q2's
``post_spawn`` signal. ``tests/webhooks/test_engine_parts.py`` checks the mask and the routing;
the group-SIGTERM end-to-end test fails if the cluster stops differently.
"""

from __future__ import annotations

import _thread
import logging
import os
import signal
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

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
    """django-q2's ``post_spawn`` receiver: start the engine with the worker process, and route
    the worker's SIGTERMs (see the module docstring)."""
    from webhooks.delivery.engine import get_engine

    get_engine(catch_ups=True)
    if threading.current_thread() is threading.main_thread():
        route_sigterm()


def route_sigterm() -> None:
    """In a shielded process's main thread: leave the task loop at a SIGTERM from the parent
    process, leave any other to the cluster's orderly stop. Does nothing unshielded."""
    if signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        return
    signal.signal(signal.SIGTERM, _leave_task_loop)
    threading.Thread(target=_take_sigterms, name="worker-sigterm", daemon=True).start()


def _take_sigterms() -> None:
    while True:
        sender = signal.sigwaitinfo(_SHIELDED).si_pid
        if sender == os.getppid():
            _thread.interrupt_main(signal.SIGTERM)  # runs _leave_task_loop in the main thread
            return
        logger.info("SIGTERM from pid %s left to the cluster's orderly stop", sender)


def _leave_task_loop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)  # the engine's timer sees the main thread end and stops in order
