"""The rule every customer action on a server obeys while the server is suspended."""

from servers.errors import ServerSuspended
from servers.models import Server


def refuse_if_suspended(server: Server) -> None:
    """Raise ServerSuspended (409 server_suspended) when the server is suspended. Every
    customer edge calls it: power, console (HTTP and websocket), files, SFTP logins, backups,
    restores and schedules."""
    if server.suspended:
        raise ServerSuspended()
