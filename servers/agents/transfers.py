"""Moving a server between agent nodes (docs/nodes.md, "Moving a server to another node").

The server's data travels from agent to agent: the target expects it under a short-lived
transfer token (made here and given to both agents; none of them stores it), the server is
stopped if it runs, the source sends its archive there, the target checks its SHA-256 and
stages it; then the target adopts it, the server moves (node,
port, address) in one transaction with server.migrated, and the source forgets its copy. Any
failure before that transaction leaves the server on the source as it was, and the migration
`failed` with its `error`.
"""

import logging
import secrets
import time
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django_q.tasks import async_task

from audit.actors import Actor
from gshost import handoff
from gshost.errors import DomainError
from gshost.withdrawals import withdraw_access
from gshost_agent.protocol import (
    TransferExpected,
    TransferFetch,
    TransferSend,
    server_route,
    transfer_route,
)
from servers.agents.runtime import agent_call
from servers.backups import object_storage
from servers.backups.jobs import backup_create
from servers.backups.storage import backup_download_url
from servers.errors import AgentError, MigrationFailed, MigrationRefused, NodeUnavailable
from servers.fleet.moves import format_address, migration_complete, new_migration_row
from servers.fleet.nodes import allocate_port, free_port_count
from servers.fleet.placement import Plan, load_of, nodes_with_usage, room_shortage
from servers.game.registry import check_game_on_node
from servers.models import (
    Backup,
    Job,
    JobState,
    MigrationState,
    Node,
    NodeState,
    Server,
    ServerMigration,
    ServerState,
)
from servers.runtime import host_traits
from servers.services import PowerAction, server_power

logger = logging.getLogger(__name__)

TRANSFER_VALID_SECONDS = 600
SEND_TIMEOUT_SECONDS = 1800.0  # the source archives and uploads before it answers
STOP_WAIT_SECONDS = 90.0
UNFINISHED_AFTER = timedelta(seconds=SEND_TIMEOUT_SECONDS + 300)


def migration_to_node_begin(*, server: Server, target: Node, actor: Actor) -> ServerMigration:
    """The checks and the migration's row; `migration_to_node_run` does the move."""
    if not host_traits(server.node).moves_between_nodes:
        raise MigrationRefused(f"{server.id} is on the simulated node; it moves by address.")
    return migration_row_to(server, target, actor)


def migration_row_to(server: Server, target: Node, actor: Actor) -> ServerMigration:
    """The migration's row, once the target is found to take the server: another agent node,
    online, offering its game, with a free port and room for its plan (MigrationRefused)."""
    if not host_traits(target).moves_between_nodes or target.id == server.node_id:
        raise MigrationRefused(f"Node {target.name} is not another agent node.")
    if target.state() != NodeState.ONLINE:
        raise MigrationRefused(f"Node {target.name} is unreachable.")
    try:
        check_game_on_node(target, server.game)
    except DomainError as refused:
        raise MigrationRefused(refused.message) from None
    if not free_port_count(target):
        raise MigrationRefused(f"Node {target.name} has no free port.")
    short = room_shortage(load_of(nodes_with_usage().get(id=target.id)), None, Plan.of(server))
    if short is not None:
        raise MigrationRefused(f"Node {target.name} has no room for this server's {short}.")
    first_guess = format_address(target.address, target.first_port)  # fixed on completion
    return new_migration_row(server, first_guess, actor, target_node=target)


def migration_to_node_start(*, server: Server, target: Node, actor: Actor) -> ServerMigration:
    """Begun now, run by a worker (the admin's action): migration-status follows it."""
    with transaction.atomic():
        migration = migration_to_node_begin(server=server, target=target, actor=actor)
        handoff.after_commit(async_task, "servers.tasks.migration_to_node", migration.id)
    return migration


def migration_to_node_run(*, migration_id: int) -> ServerMigration:
    """The move itself (a worker's task, or the `simulate` command): completed, or failed
    with the server on the source as it was."""
    migration = ServerMigration.objects.select_related("server__node", "target_node").get(
        id=migration_id
    )
    server, target = migration.server, migration.target_node
    if target is None or not _claim_run(migration):
        return migration  # finished, not between agent nodes, or run by another worker
    was_running = server.state != ServerState.STOPPED
    try:
        if was_running:
            _stop_and_wait(server, migration.requested_by)
        _transfer(server, target)
    except MigrationFailed as failure:
        _discard_on(target, server.id)
        # An answer lost after the target adopted the copy: that copy is not the server's.
        _call_quietly(target, "DELETE", server_route(server.id))
        return _failed(migration, str(failure), restart=was_running)
    try:
        completed = _complete_on_node(migration, target)
    except (IntegrityError, DomainError) as error:
        _call_quietly(target, "DELETE", server_route(server.id))
        return _failed(migration, f"the move could not be recorded: {error}", restart=was_running)
    _call_quietly(migration.server.node, "DELETE", server_route(server.id))
    if was_running:
        _start(Server.objects.select_related("node").get(id=server.id), completed.requested_by)
    return completed


def _claim_run(migration: ServerMigration) -> bool:
    """Compare-and-set: one run per move, even if its task is delivered twice."""
    return bool(
        ServerMigration.objects.filter(
            id=migration.id, state=MigrationState.MIGRATING, run_started_at__isnull=True
        ).update(run_started_at=timezone.now())
    )


def _transfer(server: Server, target: Node) -> None:
    """With object storage, the data goes through the bucket: a backup of the server (kept,
    like any other), which the target fetches and checks. Else from agent to agent."""
    token = secrets.token_urlsafe(32)
    path = transfer_route(server.id)
    # The target refuses content beyond the server's plan.
    expect = TransferExpected(token, server.game, TRANSFER_VALID_SECONDS, server.disk_mb)
    _call(target, "POST", path, expect.to_json(), "the target did not take it")
    if object_storage.configured():
        fetch_onto(target, server.id, _backup_for_move(server, target))
    else:
        send = TransferSend(target_url=target.url, target_ca=target.ca_pem, token=token)
        path = server_route(server.id, "transfer")
        _call(server.node, "POST", path, send.to_json(), "the transfer failed")
    commit = transfer_route(server.id, "commit")
    _call(target, "POST", commit, None, "the target could not adopt it")


def _backup_for_move(server: Server, target: Node) -> Backup:
    """A backup of the stopped server in the bucket, made now for the move."""
    actor = Actor.system(f"the move to node {target.name}")
    try:
        backup, job = backup_create(server=server, actor=actor, name=f"Moved to {target.name}")
    except DomainError as refused:
        raise MigrationFailed(f"the backup for the move was refused: {refused.message}") from None
    deadline = time.monotonic() + SEND_TIMEOUT_SECONDS
    while (job := Job.objects.get(id=job.id)).state not in (JobState.SUCCEEDED, JobState.FAILED):
        if time.monotonic() > deadline:
            raise MigrationFailed("the backup for the move did not finish in time")
        time.sleep(0.2)  # the node's report arrives through another process
    if job.state == JobState.FAILED:
        raise MigrationFailed(f"the backup for the move failed: {job.error}")
    return Backup.objects.get(id=backup.id)


def fetch_onto(target: Node, server_id: str, backup: Backup) -> None:
    """The expecting target fetches the backup's archive from the bucket and checks it."""
    fetch = TransferFetch(backup_download_url(backup), backup.sha256, backup.size_bytes or 0)
    path = transfer_route(server_id, "fetch")
    _call(target, "POST", path, fetch.to_json(), "the target could not fetch the archive")


def _call(node: Node, method: str, path: str, body: dict[str, Any] | None, what: str) -> None:
    try:
        agent_call(node, method, path, body, read_timeout=SEND_TIMEOUT_SECONDS)
    except AgentError as error:
        raise MigrationFailed(f"{what}: {error.message or error.agent_code}") from None
    except NodeUnavailable as error:
        raise MigrationFailed(f"{what}: {error.message}") from None


def _call_quietly(node: Node, method: str, path: str) -> None:
    """Clean-up that may fail (the node is down): logged, and what it left is harmless."""
    try:
        agent_call(node, method, path)
    except (AgentError, NodeUnavailable) as error:
        logger.warning("Node %s: %s %s failed (%s)", node.name, method, path, error)


def _discard_on(target: Node, server_id: str) -> None:
    _call_quietly(target, "DELETE", transfer_route(server_id))


def _stop_and_wait(server: Server, requested_by: str) -> None:
    try:
        server_power(server=server, action=PowerAction.STOP, actor=Actor.system(requested_by))
    except DomainError as refused:
        raise MigrationFailed(f"the server could not be stopped: {refused.message}") from None
    deadline = time.monotonic() + STOP_WAIT_SECONDS
    while Server.objects.get(id=server.id).state != ServerState.STOPPED:
        if time.monotonic() > deadline:
            raise MigrationFailed("the server did not stop in time")
        time.sleep(0.2)  # the agent's report arrives through another process


def _start(server: Server, requested_by: str) -> None:
    try:
        server_power(server=server, action=PowerAction.START, actor=Actor.system(requested_by))
    except DomainError as refused:
        logger.warning("%s: not started again after its migration: %s", server.id, refused)


def _complete_on_node(migration: ServerMigration, target: Node) -> ServerMigration:
    """One transaction: the server on the target (a port of its range), the migration
    completed, server.migrated."""
    with transaction.atomic():
        server = Server.objects.select_for_update().get(id=migration.server_id)
        if server.state != ServerState.STOPPED:  # started meanwhile, on the source
            raise MigrationRefused(f"the server was started meanwhile (it is {server.state})")
        port = allocate_port(target)
        new_address = format_address(target.address, port)
        ServerMigration.objects.filter(id=migration.id).update(new_address=new_address)
        Server.objects.filter(id=migration.server_id).update(node=target, port=port)
        # Sockets open on the source node end: the console is on the target from now on.
        withdraw_access(reason="server moved", server_ids=[migration.server_id])
        completed = migration_complete(migration_id=migration.id)
        if completed is None:
            raise MigrationRefused("the migration is no longer under way")
    return completed


def _failed(migration: ServerMigration, error: str, *, restart: bool) -> ServerMigration:
    ServerMigration.objects.filter(id=migration.id, state=MigrationState.MIGRATING).update(
        state=MigrationState.FAILED, error=error[:500]
    )
    logger.warning("%s: migration %s failed: %s", migration.server_id, migration.id, error)
    if restart:
        _start(Server.objects.select_related("node").get(id=migration.server_id),
               migration.requested_by)  # fmt: skip
    migration.refresh_from_db()
    return migration


def migrations_to_node_expire(now: datetime) -> None:
    """A move whose worker died mid-way: failed once it is overdue (the server never left
    the source; what the target staged is discarded, or gone with its agent)."""
    overdue = ServerMigration.objects.filter(
        state=MigrationState.MIGRATING,
        target_node__isnull=False,
        started_at__lte=now - UNFINISHED_AFTER,
    ).select_related("server", "target_node")
    for migration in overdue:
        target = migration.target_node
        assert target is not None
        _discard_on(target, migration.server_id)
        if migration.server.node_id != target.id:  # adopted there, never moved: not its copy
            _call_quietly(target, "DELETE", server_route(migration.server_id))
        _failed(migration, "the move did not finish in time", restart=False)
