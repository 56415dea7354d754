"""The far side of the simulated node's agent: a host that finishes what it was asked, on
time, and tells it as an agent does, in reports (`servers.agents.reports`).

Due work is read from the rows themselves, so any sweep (the follow-up task, the minute
tick, a test) can finish it, twice is harmless (each report is a compare-and-set), and a
lost task costs at most a minute.
"""

import hashlib
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from audit.actors import Actor
from gshost import handoff
from gshost_agent.protocol import Report, ReportKind
from servers.agents.reports import ReportOutcome, node_report_apply_in_process
from servers.errors import NotOnAgentNodes
from servers.fleet.moves import migrate_now, migration_complete, suggest_new_address
from servers.lifecycle import Trigger
from servers.models import (
    Job,
    JobKind,
    JobState,
    MigrationState,
    Node,
    NodeKind,
    Server,
    ServerMigration,
    ServerState,
    ServerTransition,
)
from servers.runtime import host_traits
from servers.services import server_transition
from servers.simulated import numbers

COMPLETION = {
    ServerState.STARTING: ReportKind.READY,
    ServerState.RESTARTING: ReportKind.READY,
    ServerState.STOPPING: ReportKind.HALTED,
}


def simulated_delay() -> timedelta:
    return timedelta(seconds=settings.SIMULATED_RUNTIME_DELAY_SECONDS)


def follow_up() -> None:
    """A sweep is queued now and then until the delay has passed (after commit: the rows it
    reads are the truth); `servers.recovery` and the minute tick finish anything a lost task
    left behind."""
    until = (timezone.now() + simulated_delay()).isoformat()
    handoff.after_commit(async_task, "servers.tasks.runtime_follow", until)


def finish_due_work(now: datetime) -> None:
    delay = simulated_delay()
    _finish_transitions(now - delay)
    _advance_jobs(now, delay)
    _finish_migrations(now - delay)


def _report(node: Node, report: Report) -> bool:
    """What the host did, told as an agent tells it (`servers.agents.reports`)."""
    outcome = node_report_apply_in_process(node=node, report=report)
    return outcome == ReportOutcome.APPLIED


def _finish_transitions(cutoff: datetime) -> None:
    due = Server.objects.filter(
        node__kind=NodeKind.SIMULATED, state__in=list(COMPLETION), state_changed_at__lte=cutoff
    ).select_related("node")
    for server in due:
        _report(
            server.node, Report(server_id=server.id, kind=COMPLETION[ServerState(server.state)])
        )


def _advance_jobs(now: datetime, delay: timedelta) -> None:
    unfinished = Job.objects.filter(
        server__node__kind=NodeKind.SIMULATED, state__in=(JobState.QUEUED, JobState.RUNNING)
    ).select_related("server__node")
    for job in unfinished.order_by("created_at"):
        node = job.server.node
        elapsed = now - job.created_at
        if elapsed >= delay:
            finished = Report(
                server_id=job.server_id,
                kind=ReportKind.JOB_FINISHED,
                job_id=job.id,
                succeeded=True,
                size_bytes=_backup_size(job, now),
                sha256=_backup_checksum(job),
            )
            if _report(node, finished):
                _start_after_restore(job)
        else:
            progress = 0 if job.state == JobState.QUEUED else int(100 * elapsed / delay)
            _report(
                node,
                Report(
                    server_id=job.server_id,
                    kind=ReportKind.JOB_PROGRESS,
                    job_id=job.id,
                    progress=progress,
                ),
            )


def host_stop_for_restore(job: Job) -> None:
    """A restore of a running server stops it first, as a node does (server.stopped)."""
    if job.kind == JobKind.RESTORE and job.server.state == ServerState.RUNNING:
        report = Report(server_id=job.server_id, kind=ReportKind.STOPPED_BY_NODE)
        _report(job.server.node, report)


def _start_after_restore(job: Job) -> None:
    """...and starts it again once the restore is over (server.started, a delay later)."""
    stopped = ServerTransition.objects.filter(
        server_id=job.server_id, trigger=Trigger.NODE_STOP, at__gte=job.created_at
    )
    if job.kind != JobKind.RESTORE or not stopped.exists():
        return
    started = Report(server_id=job.server_id, kind=ReportKind.STARTED_BY_NODE)
    if _report(job.server.node, started):
        follow_up()


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
