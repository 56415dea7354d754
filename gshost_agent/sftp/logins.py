"""SFTP logins: each is asked of the control plane (`POST /api/node/v1/sftp-auth`), which
checks the person's password or SSH key, membership, `files:sftp`, that the server is on this
node and not suspended, and counts failures per client address and username. The agent
decides nothing itself: without the control plane's yes, no login."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncssh

logger = logging.getLogger("gshost_agent.sftp")

SFTP_AUTH_PATH = "/api/node/v1/sftp-auth"
FILE_SCOPES = frozenset({"files:read", "files:write", "files:delete"})
EXTRA_INFO = "gshost_sftp_login"  # where a connection keeps its login

Ask = Callable[[dict[str, Any]], Awaitable[tuple[int, Any]]]


@dataclass(frozen=True)
class Login:
    """An accepted login, as the control plane answered it."""

    person_id: str
    email: str
    server_id: str
    game: str
    disk_mb: int
    scopes: frozenset[str]
    key_id: str | None  # "ssh:<id>" for a key login: a withdrawal may name the key
    at: float  # when it was accepted (seconds since the epoch)

    @classmethod
    def from_answer(cls, answer: Any, username: str) -> Login | None:
        """The login in a 200 answer; None when the answer is not one (or not for this
        username's server)."""
        if not isinstance(answer, dict) or not isinstance(answer.get("server"), dict):
            return None
        server, scopes = answer["server"], answer.get("scopes")
        server_id, person_id = answer.get("server_id"), answer.get("person_id")
        key_id = answer.get("ssh_key_id")
        if not (isinstance(server_id, str) and username.endswith("." + server_id)):
            return None
        if not isinstance(person_id, str) or not isinstance(scopes, list):
            return None
        game, disk_mb = server.get("game"), server.get("disk_mb")
        if not isinstance(game, str) or not isinstance(disk_mb, int):
            return None
        return cls(
            person_id=person_id,
            email=str(answer.get("email", "")),
            server_id=server_id,
            game=game,
            disk_mb=disk_mb,
            scopes=frozenset(str(scope) for scope in scopes) & FILE_SCOPES,
            key_id=f"ssh:{key_id}" if isinstance(key_id, int) else None,
            at=time.time(),
        )


class ConnectionGate:
    """How many SSH connections are open, logged in or not; beyond `limit`, new ones are
    closed at once (a flood of half-open logins cannot take the agent's memory)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.open = limit, 0

    def admit(self) -> bool:
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def leave(self) -> None:
        self.open = max(0, self.open - 1)


def public_key_text(key: asyncssh.SSHKey) -> str:
    """`<type> <base64>`, as the control plane stores a person's key."""
    return " ".join(key.export_public_key("openssh").decode("ascii").split()[:2])


class SftpLogins(asyncssh.SSHServer):
    """One per connection: password or public-key login, each asked of the control plane."""

    def __init__(self, ask: Ask, gate: ConnectionGate) -> None:
        self._ask, self._gate = ask, gate
        self._admitted = False
        self._connection: asyncssh.SSHServerConnection | None = None
        self._client_address = ""
        self._keys_asked: dict[tuple[str, bytes], Login | None] = {}
        self._proving: tuple[str, str] | None = None  # the key login accepted last

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._connection = conn
        peer = conn.get_extra_info("peername")
        self._client_address = str(peer[0]) if peer else ""
        self._admitted = self._gate.admit()
        if not self._admitted:
            logger.warning("SFTP: %s connections open, one more refused", self._gate.limit)
            conn.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._admitted:
            self._gate.leave()
            self._admitted = False

    def begin_auth(self, username: str) -> bool:
        return True  # every login is checked (and none while the gate is closed)

    def password_auth_supported(self) -> bool:
        return self._admitted

    def public_key_auth_supported(self) -> bool:
        return self._admitted

    async def validate_password(self, username: str, password: str) -> bool:
        return await self._login(username, {"password": password}) is not None

    async def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        # Called for a key the client offers, and again with its signature (which asyncssh
        # then checks): the control plane is asked once here, and once more when the
        # signature proved the key (auth_completed), which records the login.
        asked = (username, key.public_data)
        if asked not in self._keys_asked:
            login = await self._login(username, {"public_key": public_key_text(key)})
            self._keys_asked[asked] = login
        login = self._keys_asked[asked]
        if login is not None and self._connection is not None:
            self._connection.set_extra_info(**{EXTRA_INFO: login})
            self._proving = (username, public_key_text(key))
        return login is not None

    async def auth_completed(self) -> None:
        """A key login, now proved: asked again (and recorded); refused now, no session."""
        if self._proving is None or self._connection is None:
            return
        username, public_key = self._proving
        login = await self._login(username, {"public_key": public_key, "signed": True})
        if login is None:
            self._connection.set_extra_info(**{EXTRA_INFO: None})
            self._connection.close()

    async def _login(self, username: str, secret: dict[str, Any]) -> Login | None:
        body = {"username": username, "client_address": self._client_address, **secret}
        try:
            status, answer = await self._ask(body)
        except Exception as error:  # the control plane did not answer: no login
            logger.warning("SFTP login not checked (%s)", type(error).__name__)
            return None
        login = Login.from_answer(answer, username) if status == 200 else None
        if login is None:
            code = answer.get("error", {}).get("code") if isinstance(answer, dict) else None
            logger.info("SFTP login refused from %s (%s %s)", self._client_address, status, code)
            return None
        if "password" in secret and self._connection is not None:
            self._connection.set_extra_info(**{EXTRA_INFO: login})
            self._proving = None
        logger.info("SFTP login to %s from %s", login.server_id, self._client_address)
        return login
