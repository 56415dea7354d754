"""`simulate SERVER_ID crash|fail-start|migrate [--new-address IP:PORT]`: make the simulated
host misbehave now, so the matching events can be seen end to end. On an agent node, `crash`
kills the game process (SIGKILL: a real crash the agent reports); the others are refused."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from gshost.errors import DomainError
from servers.models import Server
from servers.simulated_host import host_crash, host_fail_start, host_migrate

WHAT = ("crash", "fail-start", "migrate")


class Command(BaseCommand):
    help = (
        "crash: a running/restarting server crashes now; fail-start: a stopped server is "
        "started and fails to start, a starting one fails now; migrate: the server moves "
        "to another host now (server.migrated). On an agent node only crash works: it kills "
        "the game with SIGKILL and the agent reports the crash."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("server_id", help="The server's id (srv_...).")
        parser.add_argument("what", choices=WHAT)
        parser.add_argument("--new-address", help="migrate: the new IP:PORT (default: a new IP)")
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
        except ValueError as error:  # a bad --new-address
            raise CommandError(str(error)) from None


def _simulate(server: Server, options: dict[str, Any]) -> str:
    what, exit_code = options["what"], options["exit_code"]
    if what == "crash" and server.node.is_agent:
        host_crash(server_id=server.id)
        return (
            f"{server.id}: the game on node {server.node.name} was killed (SIGKILL); the agent "
            "reports the crash (server.crashed)."
        )
    if what == "crash":
        after = host_crash(server_id=server.id, exit_code=1 if exit_code is None else exit_code)
        return f"{server.id} crashed ({server.state} -> {after.state}); server.crashed fired."
    if what == "fail-start":
        after = host_fail_start(server_id=server.id, exit_code=exit_code)
        return (
            f"{server.id} failed to start ({server.state} -> {after.state}); server.crashed fired."
        )
    migration = host_migrate(server_id=server.id, new_address=options["new_address"])
    return (
        f"{server.id} moved from {migration.previous_address} to {migration.new_address}; "
        "server.migrated fired."
    )
