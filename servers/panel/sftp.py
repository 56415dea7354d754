"""What a person needs to connect to a server's files over SFTP: the node's address and
port, their username there, and the host key their client should see."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from accounts.models import Membership
from servers.models import Server


@dataclass(frozen=True)
class SftpDetails:
    host: str
    port: int
    username: str
    fingerprint: str

    @property
    def command(self) -> str:
        return f"sftp -P {self.port} {self.username}@{self.host}"


def sftp_details(server: Server, membership: Membership) -> SftpDetails | None:
    """None when the server's node serves no SFTP (the simulated node, or SFTP off): its
    heartbeat told no port."""
    node = server.node
    if not node.sftp_port:
        return None
    host = node.address or urlsplit(node.url).hostname or ""
    return SftpDetails(
        host=host,
        port=node.sftp_port,
        username=f"{membership.user.email}.{server.id}",
        fingerprint=node.sftp_host_key_fingerprint,
    )
