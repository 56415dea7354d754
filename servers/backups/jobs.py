"""Backups, restores, wipes and reinstalls: jobs the runtime carries out on a server's data.

No event fires for a job itself: clients poll the job or backups. A restore of a running server
makes state changes of its own (the node stops the server and starts it again), with their
events.
"""

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from audit.actors import Actor
from audit.services import PanelAction
from servers.backups.storage import (
    backup_delete,
    backup_key,
    backup_location_for,
    backup_upload_discard,
    in_bucket,
)
from servers.errors import (
    FeatureNotEnabled,
    InvalidState,
    NodeUnavailable,
    NotAMaintenanceAction,
)
from servers.fleet.nodes import node_require_reachable
from servers.models import (
    Backup,
    BackupState,
    Job,
    JobKind,
    JobState,
    NodeKind,
    Server,
    ServerState,
)
from servers.runtime import get_runtime
from servers.selectors import server_busy_job
from servers.suspension import refuse_if_suspended

UNFINISHED = (JobState.QUEUED, JobState.RUNNING)
# An agent's job reports come while its node heartbeats (every 10 s). A node silent this long
# has gone: its unfinished jobs fail rather than stay `running` for ever.
SILENT_NODE_DEADLINE = timedelta(minutes=10)
MAINTENANCE_KINDS = (JobKind.WIPE, JobKind.REINSTALL)
RESTORABLE = (ServerState.STOPPED, ServerState.RUNNING)
RESTORE_REFUSAL = "Wait until the server is running or stopped to restore a backup."


def backup_create(*, server: Server, actor: Actor, name: str = "") -> tuple[Backup, Job]:
    """A new backup of the server as it is now, in any state; the job makes it. Refused
    while the server is suspended, and when its plan keeps no backups (`backups_limit` 0)."""
    refuse_if_suspended(server)
    if server.backups_limit == 0:
        raise FeatureNotEnabled("backups")
    node_require_reachable(server)
    with transaction.atomic():
        server = Server.objects.select_for_update().get(id=server.id)
        now = timezone.now()
        backup = Backup.objects.create(
            server=server,
            name=name or f"Backup {now:%Y-%m-%d %H:%M} UTC",
            created_at=now,
            location=backup_location_for(server),
        )
        job = _job_create(server, JobKind.BACKUP, actor, backup=backup)
    return backup, _hand_over(job)


def backup_restore(*, server: Server, backup: Backup, actor: Actor) -> Job:
    """Put the backup's data back on the server, stopped or running. The node stops a running
    server for it and starts it again after, even when the restore fails (server.stopped,
    then server.started); a server on its way up or down, or suspended, is refused."""
    refuse_if_suspended(server)
    node_require_reachable(server)
    with transaction.atomic():
        server = _idle(server, RESTORABLE, RESTORE_REFUSAL)
        if backup.state != BackupState.AVAILABLE:
            raise InvalidState(server.state, f"The backup is {backup.state}, not available.")
        job = _job_create(server, JobKind.RESTORE, actor, backup=backup)
    return _hand_over(job)


def maintenance_start(*, server: Server, kind: JobKind, actor: Actor) -> Job:
    """Wipe the world, or reinstall the game. The server must be stopped, and not suspended."""
    if kind not in MAINTENANCE_KINDS:
        raise NotAMaintenanceAction(kind)
    refuse_if_suspended(server)
    return maintenance_run(server=server, kind=kind, actor=actor)


def maintenance_run(*, server: Server, kind: JobKind, actor: Actor) -> Job:
    """`maintenance_start` without the suspension rule: the platform's own reinstall
    (servers.desired)."""
    node_require_reachable(server)
    with transaction.atomic():
        server = _idle(server, (ServerState.STOPPED,), f"Stop the server to {kind.value}.")
        job = _job_create(server, kind, actor)
    return _hand_over(job)


def _idle(server: Server, states: tuple[ServerState, ...], refusal: str) -> Server:
    """The server, locked; refused unless in one of `states` and free of another data job."""
    server = Server.objects.select_for_update().get(id=server.id)
    if server.state not in states:
        raise InvalidState(server.state, refusal)
    busy = server_busy_job(server)
    if busy is not None:
        raise InvalidState(server.state, f"A {busy.kind} job ({busy.id}) is still {busy.state}.")
    return server


def _job_create(server: Server, kind: JobKind, actor: Actor, backup: Backup | None = None) -> Job:
    job = Job.objects.create(
        server=server, kind=kind, backup=backup, requested_by=actor.describe()[:200]
    )
    actor.audit(
        organization_id=server.organization_id,
        action=PanelAction.SERVER_UPDATE,
        server_id=server.id,
    )
    return job


def _hand_over(job: Job) -> Job:
    """The committed job to the runtime (outside any transaction of ours). A node that does
    not take it fails the job (and its backup), and the refusal is raised."""
    try:
        get_runtime(job.server).run_job(job)
    except (NodeUnavailable, InvalidState) as refused:
        job_finish(job_id=job.id, succeeded=False, error=refused.message)
        raise
    return job


# Reports from the runtime. Each acts only on a job still in the state it expects.


def job_begin(*, job_id: str) -> bool:
    changed = Job.objects.filter(id=job_id, state=JobState.QUEUED).update(
        state=JobState.RUNNING, started_at=timezone.now(), progress=0
    )
    return changed == 1


def job_progress(*, job_id: str, progress: int) -> bool:
    changed = Job.objects.filter(id=job_id, state=JobState.RUNNING).update(
        progress=max(0, min(progress, 99))
    )
    return changed == 1


def job_finish(
    *,
    job_id: str,
    succeeded: bool,
    error: str = "",
    size_bytes: int | None = None,
    sha256: str = "",
) -> bool:
    """The job ended; a backup job also makes its backup available (or failed)."""
    now = timezone.now()
    with transaction.atomic():
        changed = Job.objects.filter(id=job_id, state__in=UNFINISHED).update(
            state=JobState.SUCCEEDED if succeeded else JobState.FAILED,
            progress=100 if succeeded else F("progress"),
            started_at=Coalesce(F("started_at"), now),
            finished_at=now,
            error="" if succeeded else (error or "The job failed.")[:500],
        )
        if changed != 1:
            return False
        job = Job.objects.select_related("server").get(id=job_id)
        if job.kind == JobKind.BACKUP and job.backup_id:
            Backup.objects.filter(id=job.backup_id).update(
                state=BackupState.AVAILABLE if succeeded else BackupState.FAILED,
                size_bytes=size_bytes if succeeded else None,
                sha256=sha256 if succeeded else "",
                completed_at=now,
            )
            if succeeded:
                backups_beyond_limit_delete(job.server)
    return True


def backups_beyond_limit_delete(server: Server) -> list[str]:
    """A server keeps its `backups_limit` newest available backups: once a new one is made,
    the oldest beyond the limit are deleted (never one a restore is reading). A failed backup
    counts toward nothing. The ids deleted."""
    if not server.backups_limit:
        return []
    server_id = server.id
    reading = Job.objects.filter(
        server_id=server_id, kind=JobKind.RESTORE, state__in=UNFINISHED
    ).values("backup_id")
    beyond = list(
        Backup.objects.filter(server_id=server_id, state=BackupState.AVAILABLE)
        .order_by("-created_at", "-id")[server.backups_limit :]
        .values_list("id", flat=True)
    )
    deleted = []
    actor = Actor.system(f"the backups limit of {server_id}")
    for backup in (
        Backup.objects.filter(id__in=beyond).exclude(id__in=reading).select_related("server")
    ):
        backup_delete(backup=backup, actor=actor)
        deleted.append(backup.id)
    return deleted


def jobs_fail_unreported(now: datetime) -> list[str]:
    """Unfinished jobs on agent nodes that have sent no heartbeat for SILENT_NODE_DEADLINE
    (and are at least that old): failed, their backups too. A report the node makes of one
    later finds it finished and is acknowledged and ignored. The ids of the jobs failed."""
    cutoff = now - SILENT_NODE_DEADLINE
    silent = Q(server__node__last_heartbeat_at__lt=cutoff) | Q(
        server__node__last_heartbeat_at__isnull=True
    )
    overdue = Job.objects.filter(
        silent, server__node__kind=NodeKind.AGENT, state__in=UNFINISHED, created_at__lte=cutoff
    ).values_list("id", "server__node__name")
    minutes = int(SILENT_NODE_DEADLINE.total_seconds() // 60)
    failed = []
    for job_id, node_name in overdue:
        error = f"The node {node_name} stopped reporting: no word from it for {minutes} minutes."
        if job_finish(job_id=job_id, succeeded=False, error=error):
            failed.append(job_id)
            _discard_upload(job_id)
    return failed


def _discard_upload(job_id: str) -> None:
    backup = Job.objects.select_related("backup").get(id=job_id).backup
    if backup is not None and in_bucket(backup) and backup.state == BackupState.FAILED:
        backup_upload_discard(backup_key(backup))
