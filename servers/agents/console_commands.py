"""A command typed into a console websocket, passed on by the node that holds the socket
(`POST /internal/nodes/console-commands`): the token is checked again here, against what is
true now (the key or person still holds `console:write` on the server, the server is not
suspended), then the command takes the path of `POST /servers/{id}/console`: the same
validation, the audit row for the key or person, and `console.command_sent` with
`"source": "websocket"`.
"""

from __future__ import annotations

from typing import Any

import jwt
from django.utils import timezone

from accounts import scopes as scope_catalogue
from accounts.models import ApiKey, KeyStatus, Membership
from accounts.scopes import Scope
from audit.actors import Actor
from audit.services import SocketContext
from gshost_agent.protocol import CONSOLE_SOCKET_PATH, subject_parts
from servers.agents.console_tokens import ALGORITHM, signing_keys
from servers.errors import ConsoleTokenRefused
from servers.game.capabilities import Capability, capability_require
from servers.models import ConsoleCommand, Node, Server
from servers.services import server_send_command
from servers.suspension import refuse_if_suspended

REQUIRED_CLAIMS = ["aud", "sub", "server", "scopes", "jti", "iat", "exp"]


def console_token_claims(token: str, *, node: Node) -> dict[str, Any]:
    """The claims of a token this control plane signed for `node`, still within its life."""
    try:
        kid = jwt.get_unverified_header(token).get("kid")
        key = next((k for k in signing_keys() if k.kid == kid), None)
        if key is None:
            raise ConsoleTokenRefused("The token was signed with a key no longer in use.")
        claims: dict[str, Any] = jwt.decode(
            token,
            key.private.public_key(),
            algorithms=[ALGORITHM],
            audience=node.name,
            options={"require": REQUIRED_CLAIMS},
        )
    except jwt.PyJWTError as error:
        raise ConsoleTokenRefused(f"The token is not valid: {error}.") from None
    return claims


def _actor(server: Server, subject: str, context: SocketContext) -> Actor:
    """Who the token's subject is, if it still holds console:write on `server`."""
    key_id, person_id = subject_parts(subject)
    now = timezone.now()
    if key_id is not None:
        key = ApiKey.objects.filter(key_id=key_id, organization_id=server.organization_id).first()
        if key is None or key.status_at(now) != KeyStatus.ACTIVE:
            raise ConsoleTokenRefused("The token's key is revoked or expired.")
        if key.server_restrictions and server.id not in key.server_restrictions:
            raise ConsoleTokenRefused("The token's key no longer reaches this server.")
        if Scope.CONSOLE_WRITE not in scope_catalogue.recognized(key.scopes):
            raise ConsoleTokenRefused("The token's key no longer holds console:write.")
        return Actor.websocket(context, key_id=key_id)
    membership: Membership | None = None
    if person_id is not None and person_id.isdigit():
        members = Membership.objects.select_related("user").filter(user__is_active=True)
        membership = members.filter(
            organization_id=server.organization_id, user_id=int(person_id)
        ).first()
    if membership is None or Scope.CONSOLE_WRITE not in membership.held_scopes:
        raise ConsoleTokenRefused("The token's person no longer holds console:write here.")
    return Actor.websocket(context, user_email=membership.user.email)


def console_command_from_socket(
    *, node: Node, token: str, command: str, ip: str | None = None, user_agent: str = ""
) -> ConsoleCommand:
    """Send `command` for the socket's token, as `POST /servers/{id}/console` would."""
    claims = console_token_claims(token, node=node)
    server = Server.objects.select_related("node").filter(id=str(claims["server"])).first()
    if server is None or server.node_id != node.id:
        raise ConsoleTokenRefused("The token's server is not on this node.")
    scopes = claims["scopes"]
    if not isinstance(scopes, list) or Scope.CONSOLE_WRITE.value not in scopes:
        raise ConsoleTokenRefused("The token does not grant console:write.")
    path = CONSOLE_SOCKET_PATH.format(server_id=server.id)
    actor = _actor(server, str(claims["sub"]), SocketContext(path, ip, user_agent))
    refuse_if_suspended(server)
    capability_require(server, Capability.CONSOLE)
    return server_send_command(server=server, command=command, actor=actor)
