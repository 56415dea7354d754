"""SFTP logins, asked by the agents: `POST /api/node/v1/sftp-auth` (docs/agent-protocol.md).

The agent serving SFTP asks for every login with the username (`<email>.<server id>`, split
at the last `.`), the password or public key given, and the SSH client's address. The login
is accepted when the person's panel password or one of their SSH keys matches, they are a
member of the server's organization holding `files:sftp`, the server is on the calling node
and not suspended. The answer names the person, the server, the file scopes the person holds
and what the agent needs of the server; an accepted login is audited (`files.sftp_login`,
source sftp): a password login at once, a key login when the agent asks again once the
client's signature proved the key (`signed`).

Failed logins are counted per SSH client address and username: the seventh within a minute
is refused (429) before any credential is checked, whoever is right; and per client address
over all usernames, 60 a minute. Never by the calling node's address: every login through a
node comes from it.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from accounts.models import Membership, User
from accounts.scopes import Scope
from accounts.selectors import person_by_credential
from accounts.services import ssh_key_note_used
from audit.services import audit_sftp_action, audit_sftp_login
from gshost.api import rate_limits
from gshost.errors import RateLimited
from servers.errors import SftpLoginRefused
from servers.models import Node, Server
from servers.suspension import refuse_if_suspended

logger = logging.getLogger(__name__)

FAILURES_PER_MINUTE = 6  # per client address and username
# And per client address over every username: one address trying many names is stopped too.
FAILURES_PER_ADDRESS_PER_MINUTE = 60
FILE_SCOPES = (Scope.FILES_READ, Scope.FILES_WRITE, Scope.FILES_DELETE)
MAX_USERNAME = 254 + 1 + 40


@dataclass(frozen=True)
class SftpCredentials:
    username: str
    client_address: str
    password: str | None = None
    public_key: str | None = None  # `<type> <base64>`
    # The client proved it holds the key (the agent checked its signature). Before that, a key
    # is only checked: the login is recorded once it is proved.
    signed: bool = False


@dataclass(frozen=True)
class SftpLogin:
    person_id: int
    email: str
    server_id: str
    game: str
    disk_mb: int
    scopes: tuple[str, ...]
    ssh_key_id: int | None

    def to_json(self) -> dict[str, object]:
        return {
            "person_id": str(self.person_id),
            "email": self.email,
            "server_id": self.server_id,
            "scopes": list(self.scopes),
            "ssh_key_id": self.ssh_key_id,
            "server": {"game": self.game, "disk_mb": self.disk_mb},
        }


def split_username(username: str) -> tuple[str, str] | None:
    """(email, server id) of `<email>.<server id>`; None when it is not of that form."""
    email, dot, server_id = username.rpartition(".")
    if not dot or "@" not in email or not server_id.startswith("srv_"):
        return None
    return email, server_id


def client_address_valid(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def sftp_login_check(*, node: Node, credentials: SftpCredentials) -> SftpLogin:
    """The login, recorded; SftpLoginRefused, ServerSuspended or RateLimited otherwise."""
    buckets = (
        (
            f"sftpfail:{credentials.client_address}:{credentials.username.lower()}",
            FAILURES_PER_MINUTE,
        ),
        (f"sftpfail:{credentials.client_address}", FAILURES_PER_ADDRESS_PER_MINUTE),
    )
    for bucket, limit in buckets:
        seen = rate_limits.peek(bucket, limit)
        if seen.remaining <= 0:
            raise RateLimited(retry_after=seen.retry_after)
    try:
        login = _checked(node, credentials)
    except SftpLoginRefused:
        # A key merely offered (the client asks whether it would do; an ssh-agent offers each
        # of its keys in turn) is no failed login: only a wrong password or signature is.
        if credentials.password is not None or credentials.signed:
            for bucket, limit in buckets:
                rate_limits.hit(bucket, limit)
        raise
    if credentials.public_key is not None and not credentials.signed:
        return login
    with transaction.atomic():
        organization_id = Server.objects.values_list("organization_id", flat=True).get(
            id=login.server_id
        )
        audit_sftp_login(
            organization_id=organization_id,
            user_email=login.email,
            server_id=login.server_id,
            ip=credentials.client_address,
            method="password" if credentials.password is not None else "key",
        )
        if login.ssh_key_id is not None:
            ssh_key_note_used(ssh_key_id=login.ssh_key_id)
    return login


def _checked(node: Node, credentials: SftpCredentials) -> SftpLogin:
    parts = split_username(credentials.username)
    if parts is None:
        raise _refused("not a username of the form <email>.<server id>")
    email, server_id = parts
    person = person_by_credential(
        email=email, password=credentials.password, public_key=credentials.public_key
    )
    if person is None:
        raise _refused("wrong credentials")
    server = Server.objects.filter(id=server_id).first()
    membership = (
        Membership.objects.filter(user=person.user, organization_id=server.organization_id).first()
        if server is not None
        else None
    )
    if server is None or membership is None:
        raise _refused("no such server in the person's organizations")
    held = membership.held_scopes
    if Scope.FILES_SFTP not in held:
        raise _refused("the person does not hold files:sftp")
    if server.node_id != node.id:
        raise _refused(f"the server is not on node {node.name}")
    refuse_if_suspended(server)
    return SftpLogin(
        person_id=int(person.user.pk),
        email=person.user.email,
        server_id=server.id,
        game=server.game,
        disk_mb=server.disk_mb,
        scopes=tuple(scope.value for scope in FILE_SCOPES if scope in held),
        ssh_key_id=person.ssh_key_id,
    )


def _refused(why: str) -> SftpLoginRefused:
    logger.info("SFTP login refused: %s", why)
    return SftpLoginRefused()


def sftp_change_record(
    *, server: Server, person_id: str, change: str, paths: tuple[str, ...]
) -> None:
    """A change a person made over SFTP, as the server's node reported it: an audit row of the
    server's organization, with the paths as the file API's rows give them."""
    people = User.objects.filter(pk=person_id) if person_id.isdigit() else User.objects.none()
    email = people.values_list("email", flat=True).first()
    if change == "files.rename":
        details: dict[str, Any] = {"from": paths[0], "to": paths[1]}
    elif change == "files.delete":
        details = {"paths": list(paths)}
    else:
        details = {"path": paths[0]}
    audit_sftp_action(
        organization_id=server.organization_id,
        user_email=email or f"person {person_id}",  # gone since: their id still says who
        server_id=server.id,
        action=change,
        details=details,
    )
