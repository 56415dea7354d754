"""Catching up when a hand-off was lost: the rows say what is overdue, this finishes it.

A power action queues a follow-up task after commit; when the broker cannot be reached that
task is never queued (``gshost.handoff`` logs and counts it), and django-q2's own minute tick
cannot run either. A thread in each worker process (``start_catch_up``), which
needs only the database, calls ``finish_overdue_work`` every few seconds, so a server never stays
``starting`` because a task could not be queued. Everything it calls moves rows by
compare-and-set, so running it alongside the tick, or in several processes, is harmless.
"""

from __future__ import annotations

import logging
import threading

from django.db import close_old_connections, connection

from gshost import process_state
from servers.tasks import tick

logger = logging.getLogger(__name__)

# How often each worker process finishes overdue work from the rows, broker or not.
CATCH_UP_SECONDS = 5.0


def finish_overdue_work() -> None:
    """Overdue simulated transitions, jobs and migrations; due schedules and config events;
    backups whose object was not yet deleted; suspensions, reinstalls and deletions whose
    node answers again."""
    tick()


def start_catch_up(**_signal_kwargs: object) -> None:
    """django-q2's ``post_spawn`` receiver: a thread of the worker's own runs
    ``finish_overdue_work`` every CATCH_UP_SECONDS. It needs no broker, so a
    follow-up task that could not be queued costs seconds. One thread a process: django-q2's
    sync mode sends ``post_spawn`` in the calling process for every task."""
    global _catch_up
    with _catch_up_lock:
        if _catch_up is not None and _catch_up[0].is_alive():
            return
        stop = threading.Event()
        thread = threading.Thread(
            target=catch_up_until,
            args=(stop, CATCH_UP_SECONDS),
            name="servers-catch-up",
            daemon=True,
        )
        thread.start()
        _catch_up = (thread, stop)


def stop_catch_up() -> None:
    global _catch_up
    with _catch_up_lock:
        if _catch_up is None:
            return
        thread, stop = _catch_up
        _catch_up = None
    stop.set()
    thread.join()


def catch_up_until(stop: threading.Event, every: float) -> None:
    try:
        while not stop.wait(every):
            try:
                finish_overdue_work()
            except Exception:
                logger.exception("servers catch-up failed")
            finally:
                close_old_connections()
    finally:
        connection.close()


_catch_up: tuple[threading.Thread, threading.Event] | None = None
_catch_up_lock = threading.Lock()
process_state.register("servers.catch_up", bound="one thread", reset=stop_catch_up)
