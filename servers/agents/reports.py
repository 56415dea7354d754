"""What agent nodes tell the control plane: heartbeats, and reports of what their game
processes did, applied exactly once and in order per (node, outbox). docs/agent-protocol.md."""

import logging
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from gshost_agent.protocol import ReportKind
from servers.agents.last_readings import readings_keep
from servers.agents.minutes import Minute, server_minutes_keep
from servers.backups.jobs import job_begin, job_finish, job_progress
from servers.backups.storage import backup_object_forget, backup_upload_settle
from servers.errors import InvalidState, JobNotOnNode, NodeTokenChanged, ServerNotOnNode
from servers.game.settings import settings_report_applied
from servers.lifecycle import CrashDetails, Trigger
from servers.models import Job, JobKind, Node, Server, ServerState
from servers.services import server_transition

logger = logging.getLogger(__name__)


class ReportOutcome(StrEnum):
    APPLIED = "applied"
    IGNORED = "ignored"  # the move does not apply in the server's state now
    REPEAT = "repeat"  # this seq (or a later one) of this outbox was applied already


@dataclass(frozen=True)
class JobReport:
    """What a job report adds: its progress (job_progress), or how it ended (job_finished)."""

    job_id: str
    progress: int = 0
    succeeded: bool = False
    error: str = ""
    size_bytes: int | None = None
    sha256: str = ""


@dataclass(frozen=True)
class Report:
    outbox_id: str
    seq: int
    server_id: str
    kind: ReportKind
    at: datetime | None = None
    pid: int | None = None
    exit_code: int | None = None
    crash: CrashDetails = field(default_factory=CrashDetails)
    job: JobReport | None = None


@dataclass(frozen=True)
class Capacity:
    """What a node's machine offers, as its agent tells (None where it cannot)."""

    memory_mb: int | None = None
    disk_mb: int | None = None
    cpu_percent: int | None = None


def node_heartbeat(
    *,
    node: Node,
    agent_version: str,
    servers: dict[str, str],
    games: list[str] | None = None,
    game_capabilities: dict[str, list[str]] | None = None,
    capacity: Capacity | None = None,
    readings: dict[str, Any] | None = None,
    isolation: str | None = None,
    minutes: dict[str, list[Minute]] | None = None,
) -> Node:
    """The node is alive now, offers `games` (its templates: the game registry, with each
    one's `game_capabilities`), seals its
    games off as `isolation` says (admin shows it), and its capacity is what its machine
    offers wherever staff set none (so it is the machine's at the first heartbeat, and
    staff's after they set it). One UPDATE, which also checks that `node.token_hash` is still
    the node's; its `readings` go to the cache in one write. Its servers' completed `minutes`
    (about one heartbeat in six carries some) are stored, those of servers not its own left
    out: one SELECT of its servers among them, one INSERT.
    `servers` (what the agent runs) is only compared, for the log."""
    now = timezone.now()
    changes: dict[str, Any] = {"last_heartbeat_at": now, "agent_version": agent_version}
    if games is not None and games != node.games:
        changes["games"] = games
    if game_capabilities is not None and game_capabilities != node.game_capabilities:
        changes["game_capabilities"] = game_capabilities
    if isolation is not None and isolation != node.isolation:
        changes["isolation"] = isolation
    filled = {
        name: figure
        for name, figure in asdict(capacity or Capacity()).items()
        if figure is not None and getattr(node, name) is None
    }
    # Coalesce: a figure staff set meanwhile stays.
    changes |= {name: Coalesce(F(name), Value(figure)) for name, figure in filled.items()}
    updated = Node.objects.filter(id=node.id, token_hash=node.token_hash).update(**changes)
    if not updated:
        raise NodeTokenChanged()
    for name, value in {**changes, **filled}.items():
        setattr(node, name, value)
    minutes = minutes or {}
    known = _states_of_its_servers(node, [*servers, *minutes])
    _log_disagreements(node, servers, known)
    _keep_minutes(node, minutes, known)
    readings_keep(node.id, _without_minutes(readings or {}) if minutes else readings or {})
    return node


def _states_of_its_servers(node: Node, server_ids: list[str]) -> dict[str, str]:
    """Which of these servers are the node's, with their state here: one query, none when
    there are none to check."""
    if not server_ids:
        return {}
    found = Server.objects.filter(node=node, id__in=set(server_ids)).values_list("id", "state")
    return dict(found)


def _keep_minutes(node: Node, minutes: dict[str, list[Minute]], known: dict[str, str]) -> None:
    own = {server_id: sent for server_id, sent in minutes.items() if server_id in known}
    if len(own) < len(minutes):
        logger.info("Node %s sent minutes of %s servers not its own: ignored", node.name,
                    len(minutes) - len(own))  # fmt: skip
    server_minutes_keep(minutes=own)


def _without_minutes(readings: dict[str, Any]) -> dict[str, Any]:
    """The readings to cache: their minutes are stored as rows."""
    return {
        server_id: {k: v for k, v in reading.items() if k != "minutes"}
        if isinstance(reading, dict)
        else reading
        for server_id, reading in readings.items()
    }


def _log_disagreements(node: Node, reported: dict[str, str], known: dict[str, str]) -> None:
    for server_id, state in reported.items():
        if server_id not in known:
            logger.info("Node %s runs %s, which is not one of its servers", node.name, server_id)
        elif known[server_id] != state:
            logger.info(
                "Node %s: %s is %s there, %s here", node.name, server_id, state, known[server_id]
            )


def node_report_apply(*, node: Node, report: Report) -> ReportOutcome:
    """Apply one report once. A report of a server on another node is refused (nothing
    changes); one whose move does not apply now is acknowledged and logged as ignored.
    The end of a backup to the bucket settles its upload first, outside the transaction."""
    completed = False
    if report.kind == ReportKind.JOB_FINISHED and report.job is not None:
        settled = backup_upload_settle(
            node=node,
            job_id=report.job.job_id,
            succeeded=report.job.succeeded,
            error=report.job.error,
            size_bytes=report.job.size_bytes,
        )
        completed = settled.completed
        job = replace(report.job, succeeded=settled.succeeded, error=settled.error)
        report = replace(report, job=job)
    outcome = _apply_once(node, report)
    if completed and outcome != ReportOutcome.APPLIED and report.job is not None:
        backup_object_forget(Job.objects.get(id=report.job.job_id).backup_id or "")
    return outcome


def _apply_once(node: Node, report: Report) -> ReportOutcome:
    with transaction.atomic():
        locked = Node.objects.select_for_update().filter(id=node.id).first()
        if locked is None or locked.token_hash != node.token_hash:
            raise NodeTokenChanged()
        # Locking the server waits for an action still under way on it (a start whose
        # transaction has not committed when a quick `ready` arrives), so the report is
        # applied to the state that action leaves, not the one before it.
        server = Server.objects.select_for_update().filter(id=report.server_id, node=locked)
        if server.first() is None:
            raise ServerNotOnNode()
        if report.job is not None:
            jobs = Job.objects.filter(id=report.job.job_id, server_id=report.server_id)
            if not jobs.exists():
                raise JobNotOnNode()
        last = locked.last_report_seq if locked.outbox_id == report.outbox_id else 0
        if report.seq <= last:
            return ReportOutcome.REPEAT
        outcome = _apply(locked, report)
        Node.objects.filter(id=locked.id).update(
            outbox_id=report.outbox_id, last_report_seq=report.seq
        )
    return outcome


def _apply(node: Node, report: Report) -> ReportOutcome:
    if report.job is not None:
        applied = _apply_job(report.server_id, report.kind, report.job)
        if not applied:
            logger.info(
                "Node %s report %s/%s (%s of %s) ignored: the job is not in that state",
                node.name, report.outbox_id, report.seq, report.kind.value, report.job.job_id,
            )  # fmt: skip
        return ReportOutcome.APPLIED if applied else ReportOutcome.IGNORED
    cause = f"node {node.name}: {report.kind.value}"
    try:
        with transaction.atomic():
            _move(report, cause)
    except InvalidState as refused:
        logger.info(
            "Node %s report %s/%s (%s of %s) ignored: %s",
            node.name,
            report.outbox_id,
            report.seq,
            report.kind.value,
            report.server_id,
            refused.message,
        )
        return ReportOutcome.IGNORED
    return ReportOutcome.APPLIED


def _move(report: Report, cause: str) -> None:
    """The server follows what its node did. A start or stop the node carried out but
    answered too late for was recorded as not taken (a failed start; still running): its
    `ready` or `halted` then moves the server from there, as the node's own start or stop."""
    server_id, exit_code = report.server_id, report.exit_code
    if report.kind == ReportKind.READY:
        if Server.objects.get(id=server_id).state == ServerState.STOPPED:
            server_transition(server_id=server_id, trigger=Trigger.NODE_START, cause=cause)
        server = server_transition(server_id=server_id, trigger=Trigger.READY, cause=cause)
        settings_report_applied(server=server)
    elif report.kind in (ReportKind.CRASHED, ReportKind.FAILED_TO_START):
        trigger = Trigger.CRASH if report.kind == ReportKind.CRASHED else Trigger.FAILED_TO_START
        server_transition(
            server_id=server_id,
            trigger=trigger,
            cause=cause,
            exit_code=exit_code,
            crash=report.crash,
        )
    elif report.kind == ReportKind.STARTED_BY_NODE:  # after a restore: `ready` follows
        server_transition(server_id=server_id, trigger=Trigger.NODE_START, cause=cause)
    else:  # halted, or stopped by the node: stopping (when it was not already), then stopped
        state = Server.objects.get(id=server_id).state
        if state != ServerState.STOPPING:
            server_transition(server_id=server_id, trigger=Trigger.NODE_STOP, cause=cause)
        server_transition(
            server_id=server_id, trigger=Trigger.HALTED, cause=cause, exit_code=exit_code
        )


def _apply_job(server_id: str, kind: ReportKind, report: JobReport) -> bool:
    """Through the jobs' services, which act only on a job in the state they expect."""
    if kind == ReportKind.JOB_PROGRESS:
        begun = job_begin(job_id=report.job_id)
        return job_progress(job_id=report.job_id, progress=report.progress) or begun
    applied = job_finish(
        job_id=report.job_id,
        succeeded=report.succeeded,
        error=report.error,
        size_bytes=report.size_bytes,
        sha256=report.sha256,
    )
    job = Job.objects.get(id=report.job_id)
    if applied and report.succeeded and job.kind == JobKind.REINSTALL:
        # The node wrote the desired settings over the template's defaults: in sync.
        settings_report_applied(server=Server.objects.get(id=server_id))
    return applied
