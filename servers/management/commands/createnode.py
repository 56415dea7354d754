"""`createnode NAME --url https://HOST:PORT --address PUBLIC_IP [--ports FIRST-LAST]
[--ca-file PEM] [--memory MB] [--disk MB] [--cpu PCT] [--overallocate PCT] [--tags a,b]`:
register an agent node; prints its token once (never logged). Capacity not given is what its
agent reports of its machine at its first heartbeat."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.actors import Actor
from gshost.errors import DomainError
from servers.fleet.nodes import NodeInput, node_create
from servers.models import DEFAULT_FIRST_PORT, DEFAULT_LAST_PORT

MAX_CA_FILE_BYTES = 1024 * 1024


class Command(BaseCommand):
    help = (
        "Register a node that runs the agent and print its token (gsn_...) once: give it to "
        "the agent as AGENT_TOKEN. It is stored encrypted and never shown again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="The node's name (lowercase letters, digits, dashes).")
        parser.add_argument("--url", required=True, help="The agent's URL: https://HOST:PORT")
        parser.add_argument("--address", required=True, help="The node's public IP address.")
        parser.add_argument(
            "--ports",
            default=f"{DEFAULT_FIRST_PORT}-{DEFAULT_LAST_PORT}",
            help="The range of ports game servers take, FIRST-LAST (default %(default)s).",
        )
        parser.add_argument(
            "--ca-file",
            help="PEM of the CA that signed the agent's certificate (default: the system's).",
        )

        parser.add_argument("--memory", type=int, help="Memory for game servers, MB.")
        parser.add_argument("--disk", type=int, help="Disk for game servers, MB.")
        parser.add_argument("--cpu", type=int, help="CPU for game servers, %% of one core.")
        parser.add_argument(
            "--overallocate", type=int, default=0, help="Percent beyond capacity (default 0)."
        )
        parser.add_argument("--tags", default="", help="Placement tags: a,b")

    def handle(self, *args: Any, **options: Any) -> None:
        data = NodeInput(
            name=options["name"],
            url=options["url"],
            address=options["address"],
            ports=options["ports"],
            ca_pem=_read_ca(options["ca_file"]),
            memory_mb=options["memory"],
            disk_mb=options["disk"],
            cpu_percent=options["cpu"],
            overallocate_percent=options["overallocate"],
            tags=options["tags"],
        )
        try:
            created = node_create(data=data, actor=Actor.system("createnode"))
        except DomainError as refused:
            raise CommandError(refused.message) from None
        self.stdout.write(created.token)


def _read_ca(path: str | None) -> str:
    if not path:
        return ""
    file = Path(path)
    try:
        if file.stat().st_size > MAX_CA_FILE_BYTES:
            raise CommandError(f"The CA file {path} is larger than 1 MiB.")
        return file.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as error:
        raise CommandError(f"Cannot read the CA file {path}: {error}") from None
