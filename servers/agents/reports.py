"""What agent nodes tell the control plane: heartbeats, and reports of what their game
processes did, applied exactly once and in order per (node, outbox). docs/agent-protocol.md."""

import logging
from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum
from typing import Any

from django.db import transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from gshost_agent.protocol import Heartbeat, Minute, Report, ReportKind
from servers.agents.last_readings import readings_keep
from servers.agents.minutes import server_minutes_keep
from servers.agents.sftp_logins import sftp_change_record
from servers.backups.jobs import job_begin, job_finish, job_progress
from servers.backups.storage import backup_object_forget, backup_upload_settle
from servers.errors import InvalidState, JobNotOnNode, NodeTokenChanged, ServerNotOnNode
from servers.game.capabilities import Capability
from servers.game.settings import settings_report_applied
from servers.lifecycle import CrashDetails, Trigger
from servers.models import Job, JobKind, Node, Server, ServerState
from servers.services import server_transition

logger = logging.getLogger(__name__)


KNOWN_CAPABILITIES = frozenset(capability.value for capability in Capability)


class ReportOutcome(StrEnum):
    APPLIED = "applied"
    IGNORED = "ignored"  # the move does not apply in the server's state now
    REPEAT = "repeat"  # this seq (or a later one) of this outbox was applied already


def node_heartbeat(*, node: Node, heartbeat: Heartbeat, servers_changed: bool = True) -> bool:
    """The node is alive now, offers its `games` (its templates: the game registry, with each
    one's `game_capabilities`, those this control plane knows), seals its games off as its
    `isolation` says (admin shows it), and its capacity is what its machine offers wherever
    staff set none (so it is the machine's at the first heartbeat, and staff's after they
    set it). One UPDATE, which also checks that `node.token_hash` is still the node's; its
    `readings` go to the cache in one write. Its servers' completed `minutes` (about one
    heartbeat in six carries some) are stored, those of servers not its own left out: one
    SELECT of its servers among them, one INSERT. The servers it runs are only compared
    with ours, for the log, and only when `servers_changed` since its last heartbeat.

    Returns whether withdrawals may wait for the node (its `withdrawals_until` is ahead): the
    UPDATE is made on that condition first, and again without it when it matched nothing, so
    a heartbeat with none waiting (almost all of them) stays one statement."""
    changes, filled = _node_changes(node, heartbeat)
    now = changes["last_heartbeat_at"]
    own = Node.objects.filter(id=node.id, token_hash=node.token_hash)
    quiet = Q(withdrawals_until__isnull=True) | Q(withdrawals_until__lte=now)
    withdrawals_wait = not own.filter(quiet).update(**changes)
    if withdrawals_wait and not own.update(**changes):
        raise NodeTokenChanged()
    for name, value in {**changes, **filled}.items():
        setattr(node, name, value)
    minutes = heartbeat.minutes
    servers: Mapping[str, str] = heartbeat.servers if servers_changed else {}
    known = _states_of_its_servers(node, [*servers, *minutes])
    _log_disagreements(node, servers, known)
    _keep_minutes(node, minutes, known)
    readings = heartbeat.readings
    readings_keep(node.id, _without_minutes(readings) if minutes else readings)
    return withdrawals_wait


def _node_changes(node: Node, heartbeat: Heartbeat) -> tuple[dict[str, Any], dict[str, int]]:
    """The node's columns the heartbeat changes, and the capacity figures it fills in."""
    changes: dict[str, Any] = {
        "last_heartbeat_at": timezone.now(),
        "agent_version": heartbeat.agent_version,
    }
    games = None if heartbeat.games is None else sorted(set(heartbeat.games))
    if games is not None and games != node.games:
        changes["games"] = games
    capabilities = _known_capabilities(heartbeat.game_capabilities)
    if capabilities is not None and capabilities != node.game_capabilities:
        changes["game_capabilities"] = capabilities
    if heartbeat.isolation is not None and heartbeat.isolation != node.isolation:
        changes["isolation"] = heartbeat.isolation
    sftp = heartbeat.sftp
    if sftp is not None and sftp.port != node.sftp_port:
        changes["sftp_port"] = sftp.port
    if sftp is not None and sftp.fingerprint != node.sftp_host_key_fingerprint:
        changes["sftp_host_key_fingerprint"] = sftp.fingerprint
    filled = {
        name: figure
        for name, figure in heartbeat.capacity.to_json().items()
        if figure is not None and getattr(node, name) is None
    }
    # Coalesce: a figure staff set meanwhile stays.
    changes |= {name: Coalesce(F(name), Value(figure)) for name, figure in filled.items()}
    return changes, filled


def _known_capabilities(
    listed: dict[str, tuple[str, ...]] | None,
) -> dict[str, list[str]] | None:
    """Each template's capabilities that this control plane knows (a newer agent's others are
    left out); None from an agent that does not list them."""
    if listed is None:
        return None
    return {game: sorted(set(found) & KNOWN_CAPABILITIES) for game, found in sorted(listed.items())}


def _states_of_its_servers(node: Node, server_ids: list[str]) -> dict[str, str]:
    """Which of these servers are the node's, with their state here: one query, none when
    there are none to check."""
    if not server_ids:
        return {}
    found = Server.objects.filter(node=node, id__in=set(server_ids)).values_list("id", "state")
    return dict(found)


def _keep_minutes(
    node: Node, minutes: dict[str, tuple[Minute, ...]], known: dict[str, str]
) -> None:
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


def _log_disagreements(node: Node, reported: Mapping[str, str], known: dict[str, str]) -> None:
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
    if report.kind == ReportKind.JOB_FINISHED and report.job_id is not None:
        settled = backup_upload_settle(
            node=node,
            job_id=report.job_id,
            succeeded=bool(report.succeeded),
            error=report.error or "",
            size_bytes=report.size_bytes,
        )
        completed = settled.completed
        report = replace(report, succeeded=settled.succeeded, error=settled.error)
    outcome = _apply_once(node, report)
    if completed and outcome != ReportOutcome.APPLIED and report.job_id is not None:
        backup_object_forget(Job.objects.get(id=report.job_id).backup_id or "")
    return outcome


def node_report_apply_in_process(*, node: Node, report: Report) -> ReportOutcome:
    """A report of the node's agent in this process (the simulated node's), applied as an
    agent's is, without an outbox's sequence: it reports what the rows say is due, and each
    move is a compare-and-set, so a report made twice is applied once."""
    return _apply(node, report)


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
        if report.job_id is not None:
            jobs = Job.objects.filter(id=report.job_id, server_id=report.server_id)
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
    if report.kind == ReportKind.FILES_CHANGED:
        server = Server.objects.get(id=report.server_id)
        sftp_change_record(
            server=server,
            person_id=report.person_id or "",
            change=report.change or "",
            paths=report.paths,
        )
        return ReportOutcome.APPLIED
    if report.job_id is not None:
        applied = _apply_job(report)
        if not applied:
            logger.info(
                "Node %s report %s/%s (%s of %s) ignored: the job is not in that state",
                node.name, report.outbox_id, report.seq, report.kind.value, report.job_id,
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
            crash=CrashDetails(
                signal=report.signal,
                oom=report.oom,
                last_output=report.last_output,
                reason=report.reason or "exited",
            ),
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


def _apply_job(report: Report) -> bool:
    """Through the jobs' services, which act only on a job in the state they expect."""
    job_id = report.job_id or ""
    if report.kind == ReportKind.JOB_PROGRESS:
        begun = job_begin(job_id=job_id)
        return job_progress(job_id=job_id, progress=report.progress or 0) or begun
    applied = job_finish(
        job_id=job_id,
        succeeded=bool(report.succeeded),
        error=report.error or "",
        size_bytes=report.size_bytes,
        sha256=report.sha256 or "",
    )
    job = Job.objects.get(id=job_id)
    if applied and report.succeeded and job.kind == JobKind.REINSTALL:
        # The node wrote the desired settings over the template's defaults: in sync.
        settings_report_applied(server=Server.objects.get(id=report.server_id))
    return applied
