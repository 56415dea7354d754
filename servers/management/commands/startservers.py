"""`startservers SLUG [--wait SECONDS]`: start every stopped server of the organization that
runs on an agent node (`make run` starts the demo's real game servers with it).

A node that has not reported yet is waited for, up to --wait seconds (default 0), and so is one
that turns out unavailable while its servers are started (a heartbeat of an agent that has
since stopped made it look online; the agent starting now has not sent one yet). A server that
cannot start (its node still unreachable at the deadline, a job under way) is named and left
as it is.
"""

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.selectors import organization_get_by_slug
from audit.actors import Actor
from gshost.errors import DomainError
from servers.errors import NodeUnavailable
from servers.models import Node, NodeKind, NodeState, Server, ServerState
from servers.services import PowerAction, server_power

POLL_SECONDS = 0.5


class Command(BaseCommand):
    help = "Start every stopped server of an organization that runs on an agent node."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="The organization's slug.")
        parser.add_argument("--wait", type=float, default=0.0, help="Seconds to wait for nodes.")

    def handle(self, *args: Any, **options: Any) -> None:
        organization = organization_get_by_slug(options["slug"])
        if organization is None:
            raise CommandError(f"No organization with slug {options['slug']!r}.")
        stopped = Server.objects.filter(
            organization=organization,
            state=ServerState.STOPPED,
            node__kind=NodeKind.AGENT,
            delete_requested_at__isnull=True,
        ).select_related("node")
        deadline = time.monotonic() + options["wait"]
        _wait_for_nodes({server.node_id for server in stopped}, deadline)
        actor = Actor.system("startservers command")
        waiting = list(stopped)
        while waiting:
            waiting = [server for server in waiting if not self._start(server, actor, deadline)]
            if waiting:
                time.sleep(POLL_SECONDS)

    def _start(self, server: Server, actor: Actor, deadline: float) -> bool:
        """Whether this server is done with: started, or refused for good."""
        try:
            server_power(server=server, action=PowerAction.START, actor=actor)
        except DomainError as error:
            if isinstance(error, NodeUnavailable) and time.monotonic() < deadline:
                return False
            self.stderr.write(f"{server.id} {server.name}: not started ({error})")
        else:
            self.stdout.write(f"{server.id} {server.name}: starting on {server.node.name}")
        return True


def _wait_for_nodes(node_ids: set[int], deadline: float) -> None:
    while time.monotonic() < deadline:
        nodes = Node.objects.filter(id__in=node_ids)
        if all(node.state() == NodeState.ONLINE for node in nodes):
            return
        time.sleep(POLL_SECONDS)
