"""The far side of the simulated runtime: hosts that finish what they were asked, on time.

Due work is read from the rows themselves, so any sweep (the follow-up task, the minute
tick, a test) can finish it, twice is harmless (each report is a compare-and-set), and a
lost task costs at most a minute.
"""

import contextlib
import hashlib
from datetime import datetime, timedelta

from django.db import transaction

from audit.actors import Actor
from servers.backups.jobs import job_begin, job_finish, job_progress
from servers.errors import InvalidState, NotOnAgentNodes
from servers.fleet.moves import migrate_now, migration_complete, suggest_new_address
from servers.game.settings import settings_report_applied
from servers.lifecycle import Trigger
from servers.models import (
    Job,
    JobKind,
    JobState,
    MigrationState,
    NodeKind,
    Server,
    ServerMigration,
    ServerState,
    ServerTransition,
)
from servers.runtime import get_runtime, host_traits
from servers.services import server_transition
from servers.simulated import numbers

COMPLETION = {
    ServerState.STARTING: Trigger.READY,
    ServerState.RESTARTING: Trigger.READY,
    ServerState.STOPPING: Trigger.HALTED,
}


def finish_due_work(now: datetime, delay: timedelta) -> None:
    _finish_transitions(now - delay)
    _advance_jobs(now, delay)
    _finish_migrations(now - delay)


def _finish_transitions(cutoff: datetime) -> None:
    due = Server.objects.filter(
        node__kind=NodeKind.SIMULATED, state__in=list(COMPLETION), state_changed_at__lte=cutoff
    )
    for server_id, state in due.values_list("id", "state"):
        try:
            server = server_transition(
                server_id=server_id, trigger=COMPLETION[ServerState(state)], cause="runtime"
            )
        except InvalidState:
            continue  # someone else moved it first (a crash, another sweep)
        if server.state == ServerState.RUNNING:
            settings_report_applied(server=server)


def _advance_jobs(now: datetime, delay: timedelta) -> None:
    unfinished = Job.objects.filter(
        server__node__kind=NodeKind.SIMULATED, state__in=(JobState.QUEUED, JobState.RUNNING)
    )
    for job in unfinished.order_by("created_at"):
        elapsed = now - job.created_at
        if elapsed >= delay:
            size, checksum = _backup_size(job, now), _backup_checksum(job)
            if job_finish(job_id=job.id, succeeded=True, size_bytes=size, sha256=checksum):
                _start_after_restore(job)
        elif job.state == JobState.QUEUED:
            job_begin(job_id=job.id)
        else:
            job_progress(job_id=job.id, progress=int(100 * elapsed / delay))


def host_stop_for_restore(job: Job) -> None:
    """A restore of a running server stops it first, as a node does (server.stopped)."""
    if job.kind == JobKind.RESTORE and job.server.state == ServerState.RUNNING:
        server_transition(server_id=job.server_id, trigger=Trigger.NODE_STOP, cause=_cause(job))


def _start_after_restore(job: Job) -> None:
    """...and starts it again once the restore is over (server.started, a delay later)."""
    stopped = ServerTransition.objects.filter(
        server_id=job.server_id, trigger=Trigger.NODE_STOP, cause=_cause(job)
    )
    if job.kind != JobKind.RESTORE or not stopped.exists():
        return
    with contextlib.suppress(InvalidState):  # its stop is over before its restore is
        server_transition(server_id=job.server_id, trigger=Trigger.HALTED, cause="runtime")
    try:
        server = server_transition(
            server_id=job.server_id, trigger=Trigger.NODE_START, cause=_cause(job)
        )
    except InvalidState:
        return  # someone else moved it first
    get_runtime(server).start(server)


def _cause(job: Job) -> str:
    return f"{job.kind} {job.id}"


def _backup_size(job: Job, now: datetime) -> int | None:
    if job.kind != JobKind.BACKUP:
        return None
    compressed = 0.55 + 0.1 * numbers.unit(job.id, "compression")
    return int(numbers.disk_mb(job.server_id, now) * compressed * 1024 * 1024)


def _backup_checksum(job: Job) -> str:
    """An archive's SHA-256, as an agent reports it; a restore asks for the one it restores."""
    return hashlib.sha256(job.id.encode()).hexdigest() if job.kind == JobKind.BACKUP else ""


def _finish_migrations(cutoff: datetime) -> None:
    due = ServerMigration.objects.filter(
        state=MigrationState.MIGRATING, started_at__lte=cutoff, target_node__isnull=True
    )  # a move between agent nodes is not the simulated host's to finish
    for migration_id in due.values_list("id", flat=True):
        migration_complete(migration_id=migration_id)


# What staff can make a simulated host do on purpose (`manage.py simulate`, admin actions).


def host_crash(*, server_id: str, exit_code: int = 1, cause: str = "simulate") -> Server:
    """A running or restarting server's game on a simulated host exits: server.crashed
    (exited). A game on an agent node crashes for real: `servers.services.server_kill`."""
    _simulated_only(server_id, "Crashing with a chosen exit code")
    return server_transition(
        server_id=server_id, trigger=Trigger.CRASH, cause=cause, exit_code=exit_code
    )


def _simulated_only(server_id: str, what: str) -> None:
    node = Server.objects.select_related("node").get(id=server_id).node
    if not host_traits(node).invents_readings:
        raise NotOnAgentNodes(
            f"{what} is only for servers on the simulated node; this one is on node {node.name}."
        )


def host_fail_start(
    *, server_id: str, exit_code: int | None = None, cause: str = "simulate"
) -> Server:
    """A starting server fails to start; a stopped one is started and fails at once."""
    _simulated_only(server_id, "fail-start")
    with transaction.atomic():
        if Server.objects.get(id=server_id).state == ServerState.STOPPED:
            server_transition(server_id=server_id, trigger=Trigger.START, cause=cause)
        return server_transition(
            server_id=server_id, trigger=Trigger.FAILED_TO_START, cause=cause, exit_code=exit_code
        )


def host_migrate(
    *, server_id: str, new_address: str | None = None, cause: str = "simulate"
) -> ServerMigration:
    """The server moves now: its address changes and server.migrated fires."""
    _simulated_only(server_id, "Migrating to a new address")
    server = Server.objects.get(id=server_id)
    address = new_address or suggest_new_address(server.address)
    return migrate_now(server=server, new_address=address, actor=Actor.system(cause))
