"""`createserver SLUG NAME [--game GAME] [--node NAME] [--tags a,b] [--memory MB] [--disk MB]
[--cpu PCT] [--processes N]`: a new, stopped server; prints its id.

The game is any game some node offers (the nodes' templates). Without --node the placement
rule picks the node (docs/nodes.md, "Placement"): online, not drained, with every tag given,
offering the game, with a free port and room for the plan. Without --game it takes the node's
default game (demo where the node offers it). The plan defaults to 1024 MB memory, 10240 MB
disk, 100 % of one core and 256 processes.
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from accounts.selectors import organization_get_by_slug
from audit.actors import Actor
from gshost.errors import DomainError
from servers.fleet.placement import Plan
from servers.models import Node, Server
from servers.services import server_create

DEFAULT_PLAN = Plan()


class Command(BaseCommand):
    help = "Create a server (it starts stopped) on a node and print its id (srv_...)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="The organization's slug.")
        parser.add_argument("name", help="The server's display name.")
        parser.add_argument("--game", default=None, help="A game some node offers.")
        parser.add_argument("--node", help="The node's name (default: the placement rule's).")
        parser.add_argument("--tags", default="", help="Only nodes with all these tags: a,b")
        parser.add_argument("--memory", type=int, default=DEFAULT_PLAN.memory_mb, help="MB")
        parser.add_argument("--disk", type=int, default=DEFAULT_PLAN.disk_mb, help="MB")
        parser.add_argument(
            "--cpu", type=int, default=DEFAULT_PLAN.cpu_percent, help="percent of one core"
        )
        parser.add_argument("--processes", type=int, default=DEFAULT_PLAN.processes)

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
        tags = [tag.strip() for tag in options["tags"].split(",") if tag.strip()]
        try:
            plan = Plan(options["memory"], options["disk"], options["cpu"], options["processes"])
            with transaction.atomic():
                server = server_create(
                    organization=organization,
                    name=name,
                    game=options["game"],
                    node=node,
                    plan=plan,
                    tags=tags,
                    actor=Actor.system("createserver command"),
                )
        except DomainError as refused:  # no node offers the game, none has room...
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
