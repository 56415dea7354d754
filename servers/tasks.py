"""django-q2 entry points: thin, they load what they need and call a service."""

import logging
import threading
import time
from datetime import datetime

from django.db import close_old_connections, connection
from django.utils import timezone

from gshost import process_state
from servers.config_events import config_events_apply_due
from servers.node_transfers import migration_to_node_run, migrations_to_node_expire
from servers.runtime import runtime_sweep
from servers.schedules import schedules_run_due

logger = logging.getLogger(__name__)

# A follow-up never holds a worker longer than this; the minute tick finishes the rest.
LONGEST_FOLLOW_SECONDS = 30.0
FOLLOW_INTERVAL_SECONDS = 0.5
TICK_SCHEDULE_NAME = "servers.tick"
# How often each worker process finishes overdue work from the rows, broker or not.
CATCH_UP_SECONDS = 5.0


def runtime_follow(until: str) -> None:
    """Sweep the runtime's due work now and then until `until` (ISO 8601), and once after."""
    deadline = datetime.fromisoformat(until)
    started = time.monotonic()
    while True:
        runtime_sweep(timezone.now())
        remaining = (deadline - timezone.now()).total_seconds()
        if remaining < 0 or time.monotonic() - started > LONGEST_FOLLOW_SECONDS:
            return
        time.sleep(min(remaining + 0.05, FOLLOW_INTERVAL_SECONDS))


def tick() -> None:
    """Every minute: overdue runtime work, due command schedules, due config events.
    Each part runs even if another fails, so one bad row cannot stall the rest."""
    now = timezone.now()
    parts = (runtime_sweep, schedules_run_due, config_events_apply_due, migrations_to_node_expire)
    for part in parts:
        try:
            part(now)
        except Exception:
            logger.exception("servers tick: %s failed", getattr(part, "__name__", part))


def migration_to_node(migration_id: int) -> None:
    """A move between agent nodes, begun in the admin: it records its own outcome."""
    migration_to_node_run(migration_id=migration_id)


def start_catch_up(**_signal_kwargs: object) -> None:
    """django-q2's ``post_spawn`` receiver: a thread of the worker's own runs
    ``recovery.finish_overdue_work`` every CATCH_UP_SECONDS. It needs no broker, so a
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
    from servers.recovery import finish_overdue_work

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
