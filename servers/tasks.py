"""django-q2 entry points: thin, they load what they need and call a service."""

import logging
import time
from datetime import datetime

from django.utils import timezone

from servers.agents.minutes import server_minutes_purge_expired
from servers.agents.rebuild import server_rebuild_run
from servers.agents.transfers import migration_to_node_run, migrations_to_node_expire
from servers.backups.storage import backups_deleting_finish
from servers.desired import desired_state_converge
from servers.desired import server_converge as desired_server_converge
from servers.game.config_events import config_events_apply_due
from servers.runtime import runtime_sweep
from servers.schedules import schedules_run_due
from servers.services import crash_restarts_run_due
from servers.simulated.agent import SIMULATED_AGENT

logger = logging.getLogger(__name__)

# A follow-up never holds a worker longer than this; the minute tick finishes the rest.
LONGEST_FOLLOW_SECONDS = 30.0
FOLLOW_INTERVAL_SECONDS = 0.5
TICK_SCHEDULE_NAME = "servers.tick"


def runtime_follow(until: str) -> None:
    """Sweep the simulated node's due work now and then until `until` (ISO 8601), and once
    after. Agent nodes report by themselves; the minute tick times out their silent jobs."""
    deadline = datetime.fromisoformat(until)
    started = time.monotonic()
    while True:
        SIMULATED_AGENT.sweep(timezone.now())
        remaining = (deadline - timezone.now()).total_seconds()
        if remaining < 0 or time.monotonic() - started > LONGEST_FOLLOW_SECONDS:
            return
        time.sleep(min(remaining + 0.05, FOLLOW_INTERVAL_SECONDS))


def crash_restart(due: str) -> None:
    """Queued when a crash is to be followed by a start: wait until it is due (ISO 8601),
    then start what is due. The tick does it too, should this task be lost."""
    wait = (datetime.fromisoformat(due) - timezone.now()).total_seconds()
    time.sleep(min(max(wait, 0.0), LONGEST_FOLLOW_SECONDS))
    crash_restarts_run_due(timezone.now())


def tick() -> None:
    """Every minute: overdue runtime work, due command schedules, due config events, backups
    left deleting, suspensions, reinstalls and deletions not carried out yet.
    Each part runs even if another fails, so one bad row cannot stall the rest."""
    now = timezone.now()
    parts = (
        runtime_sweep,
        crash_restarts_run_due,
        schedules_run_due,
        config_events_apply_due,
        migrations_to_node_expire,
        backups_deleting_finish,
        desired_state_converge,
    )
    for part in parts:
        try:
            part(now)
        except Exception:
            logger.exception("servers tick: %s failed", getattr(part, "__name__", part))


def server_converge(server_id: str) -> None:
    """Queued after a suspension, reinstall or deletion commits: its first step now (the tick
    takes the next ones)."""
    desired_server_converge(server_id=server_id)


def migration_to_node(migration_id: int) -> None:
    """A move between agent nodes, begun in the admin: it records its own outcome."""
    migration_to_node_run(migration_id=migration_id)


def server_rebuild(migration_id: int) -> None:
    """Rebuild a server from its latest backup in the bucket (servers.agents.rebuild)."""
    server_rebuild_run(migration_id=migration_id)


def purge_minutes() -> None:
    """Every hour: the minutes agent nodes sent, once older than 24 h, are deleted."""
    server_minutes_purge_expired()
