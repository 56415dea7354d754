"""Catching up when a hand-off was lost: the rows say what is overdue, this finishes it.

A power action queues a follow-up task after commit; when the broker cannot be reached that
task is never queued (``gshost.handoff`` logs and counts it), and django-q2's own minute tick
cannot run either. A thread in each worker process (``servers.tasks.start_catch_up``), which
needs only the database, calls ``finish_overdue_work`` every few seconds, so a server never stays
``starting`` because a task could not be queued. Everything it calls moves rows by
compare-and-set, so running it alongside the tick, or in several processes, is harmless.
"""

from __future__ import annotations

from servers.tasks import tick


def finish_overdue_work() -> None:
    """Overdue simulated transitions, jobs and migrations; due schedules and config events."""
    tick()
