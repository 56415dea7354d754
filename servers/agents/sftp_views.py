"""`POST /api/node/v1/sftp-auth`: an agent asks whether an SFTP login is accepted."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from servers.agents.sftp_logins import (
    MAX_USERNAME,
    SftpCredentials,
    client_address_valid,
    sftp_login_check,
)
from servers.agents.views import node_route
from servers.errors import InvalidNodeRequest
from servers.models import Node

MAX_SECRET = 16_384  # a password, or a public key in OpenSSH's one-line form


def _credentials(body: dict[str, Any]) -> SftpCredentials:
    username, address = body.get("username"), body.get("client_address")
    if not isinstance(username, str) or not 0 < len(username) <= MAX_USERNAME:
        raise InvalidNodeRequest("username", "username must be <email>.<server id>.")
    if not isinstance(address, str) or not client_address_valid(address):
        raise InvalidNodeRequest("client_address", "client_address must be an IP address.")
    password, public_key = body.get("password"), body.get("public_key")
    given = [value for value in (password, public_key) if value is not None]
    if len(given) != 1 or not isinstance(given[0], str) or len(given[0]) > MAX_SECRET:
        raise InvalidNodeRequest(
            "password", "Send either password or public_key, a string (not both)."
        )
    signed = body.get("signed", False)
    if not isinstance(signed, bool):
        raise InvalidNodeRequest("signed", "signed must be true or false.")
    return SftpCredentials(
        username=username,
        client_address=address,
        password=password,
        public_key=public_key,
        signed=signed,
    )


def _sftp_auth(request: HttpRequest, node: Node, body: dict[str, Any]) -> HttpResponse:
    login = sftp_login_check(node=node, credentials=_credentials(body))
    return JsonResponse(login.to_json())


sftp_auth = node_route(_sftp_auth)
sftp_auth.__name__ = "sftp_auth"
