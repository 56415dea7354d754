"""`createserver SLUG NAME [--game GAME] [--node NAME]`: a new, stopped server; prints its id.

Without --node it goes on the agent node with the most free ports, or on `simulated` while
there is none (or for a game only the simulated node runs). Without --game it takes the
node's first game (demo on agent nodes, minecraft on the simulated node).
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from accounts.selectors import organization_get_by_slug
from gshost.errors import DomainError
from servers.models import Game, Node, Server
from servers.services import server_create


class Command(BaseCommand):
    help = "Create a server (it starts stopped) on a node and print its id (srv_...)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="The organization's slug.")
        parser.add_argument("name", help="The server's display name.")
        parser.add_argument("--game", choices=Game.values, default=None)
        parser.add_argument("--node", help="The node's name (default: see above).")

    def handle(self, *args: Any, **options: Any) -> None:
        name = _checked_name(options["name"])
        organization = organization_get_by_slug(options["slug"])
        if organization is None:
            raise CommandError(f"No organization with slug {options['slug']!r}.")
        node = None
        if options["node"] is not None:
            node = Node.objects.filter(name=options["node"]).first()
            if node is None:
                raise CommandError(f"No node named {options['node']!r}.")
        try:
            with transaction.atomic():
                server = server_create(
                    organization=organization, name=name, game=options["game"], node=node
                )
        except DomainError as refused:  # a game the node does not run, no free port...
            raise CommandError(refused.message) from None
        self.stdout.write(server.id)


def _checked_name(name: str) -> str:
    max_length = Server._meta.get_field("name").max_length or 0
    name = name.strip()
    if not name:
        raise CommandError("The server needs a name.")
    if len(name) > max_length:
        raise CommandError(f"The name is too long: at most {max_length} characters.")
    return name
