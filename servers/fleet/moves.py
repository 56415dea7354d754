"""Moving a server to another host. Its public address changes when the move completes, and
server.migrated fires then with the old and new address. On the simulated node the host just
finishes the move; between agent nodes the data travels too (`servers.agents.transfers`)."""

import ipaddress
import random

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.actors import Actor
from servers import events
from servers.errors import InvalidAddress, InvalidState
from servers.models import MigrationState, Node, Server, ServerMigration
from servers.runtime import address_mover
from webhooks.events import Event


def parse_address(address: str) -> tuple[str, int]:
    """`ip:port` (IPv6 in brackets) -> (ip, port), or InvalidAddress."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InvalidAddress("An address is IP:PORT, with a port from 1 to 65535.")
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        ip = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        raise InvalidAddress(f"{host!r} is not an IP address.") from None
    if ip.version == 6 and not bracketed:
        raise InvalidAddress("Write an IPv6 address in brackets: [2001:db8::1]:25565.")
    return str(ip), int(port)


def format_address(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def suggest_new_address(current: str) -> str:
    """Another host in the documentation range, same port: the usual kind of move."""
    try:
        _, port = parse_address(current)
    except InvalidAddress:
        port = 25565
    while True:
        candidate = f"198.51.100.{random.randint(1, 254)}:{port}"
        if candidate != current:
            return candidate


def new_migration_row(
    server: Server, new_address: str, actor: Actor, target_node: Node | None = None
) -> ServerMigration:
    ip, port = parse_address(new_address)
    new_address = format_address(ip, port)
    if new_address == server.address:
        raise InvalidAddress("The server is already at that address.")
    try:
        with transaction.atomic():
            return ServerMigration.objects.create(
                server=server,
                previous_address=server.address,
                new_address=new_address,
                requested_by=actor.describe()[:200],
                target_node=target_node,
            )
    except IntegrityError:
        raise InvalidState(server.state, "The server is already being migrated.") from None


def migration_begin(*, server: Server, new_address: str, actor: Actor) -> ServerMigration:
    """Ask the simulated host to move the server; it reports back with
    `migration_complete`. NotOnAgentNodes for a server on an agent node."""
    mover = address_mover(server)
    with transaction.atomic():
        migration = new_migration_row(server, new_address, actor)
    mover.migrate(migration)
    return migration


def migration_complete(*, migration_id: int) -> ServerMigration | None:
    """The move is done: the new address is live. None if it was already completed."""
    with transaction.atomic():
        now = timezone.now()
        changed = ServerMigration.objects.filter(
            id=migration_id, state=MigrationState.MIGRATING
        ).update(state=MigrationState.COMPLETED, completed_at=now)
        if changed != 1:
            return None
        migration = ServerMigration.objects.select_related("server").get(id=migration_id)
        server = migration.server
        Server.objects.filter(id=server.id).update(address=migration.new_address, updated_at=now)
        server.address = migration.new_address
        events.publish(server, Event.SERVER_MIGRATED, _event_data(migration), occurred_at=now)
    return migration


def migrate_now(*, server: Server, new_address: str, actor: Actor) -> ServerMigration:
    """Move the server at once (the `simulate migrate` command)."""
    with transaction.atomic():
        migration = new_migration_row(server, new_address, actor)
        completed = migration_complete(migration_id=migration.id)
    assert completed is not None
    return completed


def _event_data(migration: ServerMigration) -> dict[str, object]:
    old_port = migration.previous_address.rpartition(":")[2]
    new_port = migration.new_address.rpartition(":")[2]
    return {
        "previous_address": migration.previous_address,
        "new_address": migration.new_address,
        "port_changed": old_port != new_port,
    }
