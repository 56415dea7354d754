"""Desired state: what the Application API asked of a server, carried out when its node answers.

`servers.services` records a suspension, a reinstall or a deletion at once, whatever the node
(`server_suspend`, `server_reinstall_request`, `server_delete_request`). This module brings
each server to what was asked, one step at a time, from a task queued after that commit and
from every tick (`servers.recovery` runs one every few seconds in each worker), so a node that
was down is caught up within seconds of answering again:

- suspended: its game is stopped (it is not started again by anyone while suspended);
- to be reinstalled: its game stopped, then a reinstall job empties its directory (backups are
  kept; the game's next start writes its settings file); the request is cleared when the node
  takes the job, and kept when it does not;
- to be deleted: its game stopped, the node removes its directory and its backups there, the
  bucket its backups' objects, then its rows go.

Every step is a compare-and-set on the rows or a call that changes nothing when repeated, so
any number of workers may run it at once. Calls to nodes and the bucket are made outside any
transaction; a node that does not answer leaves the request where it was.
"""

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit.actors import Actor
from gshost.errors import DomainError
from servers.backups.jobs import maintenance_run
from servers.backups.storage import backup_objects_remove
from servers.fleet.nodes import node_require_reachable
from servers.lifecycle import Trigger
from servers.models import (
    Job,
    JobKind,
    JobState,
    MigrationState,
    Server,
    ServerMigration,
    ServerState,
    ServerTransition,
)
from servers.runtime import get_runtime
from servers.services import PowerAction, power_request

logger = logging.getLogger(__name__)

CONVERGING_PER_TICK = 200
# A step the node did not take (a stop, a reinstall job) is asked again this much later, not at
# every tick: an agent that heartbeats but refuses would otherwise fill the history.
RETRY_AFTER = timedelta(seconds=30)
SUSPENDED = Actor.system("the server is suspended")
REINSTALL = Actor.system("the server is to be reinstalled")
DELETE = Actor.system("the server is to be deleted")


def pending_servers() -> list[str]:
    """Servers with something left to do: a suspended game not stopped yet, a reinstall or a
    deletion asked."""
    pending = Server.objects.filter(
        Q(suspended_at__isnull=False, state__in=_NOT_STOPPED)
        | Q(reinstall_requested_at__isnull=False)
        | Q(delete_requested_at__isnull=False)
    )
    return list(pending.order_by("id").values_list("id", flat=True)[:CONVERGING_PER_TICK])


_NOT_STOPPED = [state for state in ServerState if state != ServerState.STOPPED]


def desired_state_converge(_now: datetime | None = None) -> None:
    """The tick's part: one step for every server with something left to do."""
    for server_id in pending_servers():
        server_converge(server_id=server_id)


def server_converge(*, server_id: str) -> bool:
    """One step toward what was asked of the server; True once nothing is left to do. A node
    or bucket that does not answer (logged), or a job still at work, is a False, never an
    error: the next tick tries again."""
    server = Server.objects.select_related("node").filter(id=server_id).first()
    if server is None:
        return True
    try:
        if server.deleting:
            return _deleted(server)
        if server.reinstall_requested_at is not None:
            return _reinstalled(server)
        if server.suspended:
            return _stopped(server, SUSPENDED)
    except DomainError as not_yet:  # the node or the bucket did not take a step
        logger.info("Server %s: not converged yet: %s", server.id, not_yet)
        return False
    return True


def _stopped(server: Server, actor: Actor) -> bool:
    """Whether its game is stopped; a running one is asked to stop (server.stopped follows)."""
    if server.state == ServerState.STOPPED:
        return True
    if server.state == ServerState.RUNNING and not _stop_refused_lately(server):
        power_request(server=server, action=PowerAction.STOP, actor=actor)
    return False  # starting, restarting, stopping: its node reports the next state


def _stop_refused_lately(server: Server) -> bool:
    last = ServerTransition.objects.filter(server=server).order_by("-at", "-id").first()
    return (
        last is not None
        and last.trigger == Trigger.NOT_TAKEN
        and timezone.now() - last.at < RETRY_AFTER
    )


def _busy(server: Server) -> bool:
    """A job on its data, or a move to another node, still under way: wait for its end."""
    working = Job.objects.filter(server=server, state__in=(JobState.QUEUED, JobState.RUNNING))
    moving = ServerMigration.objects.filter(server=server, state=MigrationState.MIGRATING)
    return working.exists() or moving.exists()


def _reinstalled(server: Server) -> bool:
    if _busy(server) or not _stopped(server, REINSTALL):
        return False
    refused = Job.objects.filter(
        server=server,
        kind=JobKind.REINSTALL,
        state=JobState.FAILED,
        created_at__gt=timezone.now() - RETRY_AFTER,
    )
    if refused.exists():
        return False
    # The job is made while the request stands (its body then asks for an empty directory);
    # one job at a time per server, so another worker's attempt is refused meanwhile. A job
    # the node did not take leaves the request as it was.
    maintenance_run(server=server, kind=JobKind.REINSTALL, actor=REINSTALL)
    asked = server.reinstall_requested_at
    Server.objects.filter(id=server.id, reinstall_requested_at=asked).update(
        reinstall_requested_at=None
    )
    return True


def _deleted(server: Server) -> bool:
    if _busy(server) or not _stopped(server, DELETE):
        return False
    node_require_reachable(server)
    get_runtime(server).remove(server)
    backup_objects_remove(server)
    with transaction.atomic():
        Server.objects.filter(id=server.id, delete_requested_at=server.delete_requested_at).delete()
    logger.info("Server %s deleted, as asked at %s", server.id, server.delete_requested_at)
    return True
