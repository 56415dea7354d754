"""What staff can make a host do on purpose, to see the events end to end (`manage.py
simulate`, the admin's actions). A crash is one service over the runtime boundary for every
node (`servers.services.server_kill`: SIGKILL on an agent node, the simulated host's crash on
the simulated node); a failed start and a move to a new address are mishaps of the simulated
host only, refused on agent nodes."""

from audit.actors import Actor
from servers.models import Server, ServerMigration
from servers.services import server_kill
from servers.simulated.host import host_crash, host_fail_start, host_migrate

__all__ = ["mishap_crash", "mishap_fail_start", "mishap_migrate"]


def mishap_crash(*, server: Server, actor: Actor, exit_code: int | None = None) -> Server:
    """The game crashes now: killed (SIGKILL), or on the simulated node ending with
    `exit_code` when one is given."""
    if exit_code is not None:
        return host_crash(server_id=server.id, exit_code=exit_code, cause=actor.describe())
    return server_kill(server=server, actor=actor)


def mishap_fail_start(*, server: Server, actor: Actor, exit_code: int | None = None) -> Server:
    return host_fail_start(server_id=server.id, exit_code=exit_code, cause=actor.describe())


def mishap_migrate(*, server: Server, new_address: str | None = None) -> ServerMigration:
    return host_migrate(server_id=server.id, new_address=new_address)
