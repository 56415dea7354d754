"""`simulate SERVER_ID crash|fail-start|migrate [--new-address IP:PORT] [--node NAME]`: make
the simulated host misbehave now, so the matching events can be seen end to end. On an agent
node, `crash` kills the game process (SIGKILL: a real crash the agent reports), `migrate
--node NAME` moves the server to that agent node (its data too) and waits for the outcome;
`fail-start` is refused."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.actors import Actor
from gshost.errors import DomainError
from servers.agents.transfers import migration_to_node_begin, migration_to_node_run
from servers.models import MigrationState, Node, Server
from servers.runtime import host_traits
from servers.simulated.mishaps import mishap_crash, mishap_fail_start, mishap_migrate

WHAT = ("crash", "fail-start", "migrate")


class Command(BaseCommand):
    help = (
        "crash: a running/restarting server crashes now; fail-start: a stopped server is "
        "started and fails to start, a starting one fails now; migrate: the server moves "
        "to another host now (server.migrated). On an agent node, crash kills the game with "
        "SIGKILL and the agent reports the crash; migrate --node NAME moves the server and its "
        "data to that agent node."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("server_id", help="The server's id (srv_...).")
        parser.add_argument("what", choices=WHAT)
        parser.add_argument("--new-address", help="migrate: the new IP:PORT (default: a new IP)")
        parser.add_argument("--node", help="migrate (agent nodes): the agent node to move to")
        parser.add_argument(
            "--exit-code", type=int, default=None, help="crash/fail-start: the game's exit code"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        server = Server.objects.select_related("node").filter(id=options["server_id"]).first()
        if server is None:
            raise CommandError(f"No server {options['server_id']!r}.")
        try:
            self.stdout.write(_simulate(server, options))
        except DomainError as refused:  # the state does not allow it, or the node does not
            raise CommandError(refused.message) from None


def _simulate(server: Server, options: dict[str, Any]) -> str:
    what, exit_code = options["what"], options["exit_code"]
    actor = Actor.system("simulate")
    if what == "crash":
        after = mishap_crash(server=server, actor=actor, exit_code=exit_code)
        # A real process was killed: its node reports the crash, which may be in already.
        if not host_traits(server.node).invents_readings:
            return (
                f"{server.id}: the game on node {server.node.name} was killed (SIGKILL); its "
                "node reports the crash (server.crashed)."
            )
        return f"{server.id} crashed ({server.state} -> {after.state}); server.crashed fired."
    if what == "fail-start":
        after = mishap_fail_start(server=server, actor=actor, exit_code=exit_code)
        return (
            f"{server.id} failed to start ({server.state} -> {after.state}); server.crashed fired."
        )
    if host_traits(server.node).moves_between_nodes or options["node"]:
        return _migrate_to_node(server, options["node"])
    migration = mishap_migrate(server=server, new_address=options["new_address"])
    return (
        f"{server.id} moved from {migration.previous_address} to {migration.new_address}; "
        "server.migrated fired."
    )


def _migrate_to_node(server: Server, node_name: str | None) -> str:
    if not host_traits(server.node).moves_between_nodes:
        raise CommandError("--node is for servers on agent nodes; this one moves by address.")
    target = Node.objects.filter(name=node_name).first() if node_name else None
    if target is None:
        raise CommandError("Name the agent node to move to: --node NAME.")
    begun = migration_to_node_begin(server=server, target=target, actor=Actor.system("simulate"))
    migration = migration_to_node_run(migration_id=begun.id)
    if migration.state == MigrationState.FAILED:
        raise CommandError(f"{server.id} stays on node {server.node.name}: {migration.error}")
    return (
        f"{server.id} moved from node {server.node.name} ({migration.previous_address}) to node "
        f"{target.name} ({migration.new_address}); server.migrated fired."
    )
