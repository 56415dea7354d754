"""The audit trail's domain errors (mapped to answers at the edges, like every app's)."""

from gshost.errors import NotFound


class ServerOutsideRestrictions(NotFound):
    """A restricted caller filtered by a server it may not see: told exactly what a server
    that does not exist would be told."""

    code = "server_not_found"
    default_message = "No such server."
