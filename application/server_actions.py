"""Suspend, unsuspend, reinstall and delete: the servers app's desired-state writes, each
recorded at once and carried out when the server's node answers (also while it is down)."""

from enum import StrEnum

from django.db import transaction

from application.models import SoldServer
from audit.actors import Actor
from servers.models import Server
from servers.services import (
    server_delete_request,
    server_reinstall_request,
    server_suspend,
    server_unsuspend,
)


class ServerAction(StrEnum):
    SUSPEND = "suspend"
    UNSUSPEND = "unsuspend"
    REINSTALL = "reinstall"
    DELETE = "delete"


def sold_server_act(*, server: Server, action: ServerAction, actor: Actor) -> None:
    if action == ServerAction.SUSPEND:
        server_suspend(server=server, actor=actor)
    elif action == ServerAction.UNSUSPEND:
        server_unsuspend(server=server, actor=actor)
    elif action == ServerAction.REINSTALL:
        server_reinstall_request(server=server, actor=actor)
    else:
        with transaction.atomic():
            server_delete_request(server=server, actor=actor)
            # The external id is free at once: the billing system may sell it again while the
            # node still removes the old server.
            SoldServer.objects.filter(server=server).update(external_id=None)
