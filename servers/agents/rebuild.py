"""Rebuilding a server on another node from its latest backup in the bucket: how a customer's
server survives a node that is gone for good (docs/nodes.md, "Rebuild on another node").

Staff's admin action. The server's node must be gone: unreachable, or, in the 30 s after its
last heartbeat, not answering a call now (a node that answers moves its servers with "Migrate
to node…", data and all). The server is placed anew: on the node staff
pick, else where the placement rule puts its game and plan, among the other agent nodes. The target
fetches the latest available backup from the bucket, checks its SHA-256 and size, and adopts
it; then, in one transaction, the server moves there (node, port, address) and
server.migrated fires. A server that ran is started again there. Any failure before that
transaction leaves the server where it was, and the migration `failed` with its `error`.
"""

import secrets

from django.db import transaction
from django_q.tasks import async_task

from audit.actors import Actor
from gshost import handoff
from gshost.errors import DomainError
from gshost_agent.protocol import NODE_ROUTE, TransferExpected, server_route, transfer_route
from servers.agents.runtime import AgentError, agent_call
from servers.agents.transfers import (
    TRANSFER_VALID_SECONDS,
    _call,
    _call_quietly,
    _claim_run,
    _complete_on_node,
    _discard_on,
    _failed,
    _start,
    fetch_onto,
    migration_row_to,
)
from servers.backups.storage import in_bucket
from servers.errors import MigrationFailed, MigrationRefused, NodeAnswerLate, NodeUnavailable
from servers.fleet.placement import Plan, node_loads, rank, refusal, shortage
from servers.lifecycle import Trigger
from servers.models import (
    Backup,
    BackupState,
    Node,
    NodeState,
    Server,
    ServerMigration,
    ServerState,
)
from servers.runtime import host_traits
from servers.services import server_transition


def latest_backup_in_bucket(server: Server) -> Backup | None:
    backups = Backup.objects.filter(server=server, state=BackupState.AVAILABLE)
    latest = backups.exclude(sha256="").order_by("-created_at", "-id")
    return next((backup for backup in latest if in_bucket(backup)), None)


def rebuild_target(server: Server) -> Node:
    """Where the server goes when staff pick no node: the node the placement rule picks for
    its game and plan (docs/nodes.md, "Placement"), among agent nodes other than its own."""
    plan = Plan.of(server)
    loads = [
        load
        for load in node_loads()
        if host_traits(load.node).moves_between_nodes and load.node.id != server.node_id
    ]
    fitting = [load for load in loads if shortage(load, server.game, plan, ()) is None]
    if not fitting:
        raise MigrationRefused(refusal(loads, server.game, plan, ()).message)
    return rank(fitting)[0].node


def server_rebuild_check(server: Server) -> None:
    """MigrationRefused unless the server can be rebuilt: on an agent node that is gone, with
    a backup in the bucket. May call the node: never inside a transaction."""
    source = server.node
    if not host_traits(source).moves_between_nodes:
        raise MigrationRefused(f"{server.id} is on the simulated node; it has no data to rebuild.")
    _require_gone(source)
    if latest_backup_in_bucket(server) is None:
        raise MigrationRefused(f"{server.id} has no available backup in object storage.")


def _require_gone(source: Node) -> None:
    """Gone: no heartbeat for 30 s, or, in the 30 s after its last one (staff just stopped
    it), an agent that cannot be reached now. One that answers, even late, is not gone."""
    if source.state() != NodeState.ONLINE:
        return
    try:
        agent_call(source, "GET", NODE_ROUTE)
    except NodeAnswerLate:
        pass  # it took the call: alive, if slow
    except NodeUnavailable:
        return
    except AgentError:
        pass  # it answered
    raise MigrationRefused(
        f"Node {source.name} answers: move the server with Migrate to node… instead."
    )


def server_rebuild_begin(*, server: Server, target: Node | None, actor: Actor) -> ServerMigration:
    """The checks and the migration's row; `server_rebuild_run` does the rebuild."""
    server_rebuild_check(server)
    return migration_row_to(server, target or rebuild_target(server), actor)


def server_rebuild_start(*, server: Server, target: Node | None, actor: Actor) -> ServerMigration:
    """Begun now, run by a worker (the admin's action): migration-status follows it. The
    checks ask the node first, outside the transaction that records the migration."""
    server_rebuild_check(server)
    with transaction.atomic():
        migration = migration_row_to(server, target or rebuild_target(server), actor)
        handoff.after_commit(async_task, "servers.tasks.server_rebuild", migration.id)
    return migration


def server_rebuild_run(*, migration_id: int) -> ServerMigration:
    """The rebuild itself (a worker's task): completed, or failed with the server where it
    was."""
    migration = ServerMigration.objects.select_related("server__node", "target_node").get(
        id=migration_id
    )
    server, target = migration.server, migration.target_node
    if target is None or not _claim_run(migration):
        return migration
    backup = latest_backup_in_bucket(server)
    was_running = server.state != ServerState.STOPPED
    try:
        if backup is None:
            raise MigrationFailed("the server has no available backup in object storage")
        _restore_onto(target, server, backup)
    except MigrationFailed as failure:
        _discard_on(target, server.id)
        _call_quietly(target, "DELETE", server_route(server.id))
        return _failed(migration, str(failure), restart=False)
    try:
        _stopped_with_its_node(server, target)
        completed = _complete_on_node(migration, target)
    except DomainError as error:
        _call_quietly(target, "DELETE", server_route(server.id))
        return _failed(migration, f"the rebuild could not be recorded: {error}", restart=False)
    _call_quietly(server.node, "DELETE", server_route(server.id))  # if it ever answers again
    if was_running:
        _start(Server.objects.select_related("node").get(id=server.id), completed.requested_by)
    return completed


def _restore_onto(target: Node, server: Server, backup: Backup) -> None:
    path = transfer_route(server.id)
    token = secrets.token_urlsafe(32)  # nobody uploads: the target fetches
    expect = TransferExpected(token, server.game, TRANSFER_VALID_SECONDS, server.disk_mb)
    _call(target, "POST", path, expect.to_json(), "the target did not take it")
    fetch_onto(target, server.id, backup)
    commit = transfer_route(server.id, "commit")
    _call(target, "POST", commit, None, "the target could not adopt it")


def _stopped_with_its_node(server: Server, target: Node) -> None:
    """The server's game went with its node: stopped (server.stopped), whatever it was."""
    cause = f"node {server.node.name} is gone: rebuilt on node {target.name}"
    state = Server.objects.get(id=server.id).state
    if state in (ServerState.STARTING, ServerState.RUNNING, ServerState.RESTARTING):
        server_transition(server_id=server.id, trigger=Trigger.NODE_STOP, cause=cause)
        state = ServerState.STOPPING
    if state == ServerState.STOPPING:
        server_transition(server_id=server.id, trigger=Trigger.HALTED, cause=cause)
