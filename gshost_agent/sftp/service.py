"""The agent's SFTP service: asyncssh listening on AGENT_SFTP_PORT (0: none), its host key,
the open sessions, and their end when a withdrawal covers them.

Started and closed by the node (gshost_agent/node.py). A port that cannot be bound is logged
and the agent runs on without SFTP: its games matter more. Work on files runs in a pool of
its own (SFTP_THREADS), so a busy transfer never starves the agent's other threads.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import asyncssh

from gshost_agent.files.jail import Jail
from gshost_agent.files.spaces import FileSpaces
from gshost_agent.protocol import ReportKind
from gshost_agent.sftp.files import JailedSftp
from gshost_agent.sftp.host_key import fingerprint, host_key
from gshost_agent.sftp.logins import EXTRA_INFO, Ask, ConnectionGate, Login, SftpLogins
from gshost_agent.withdrawals import Withdrawal, Withdrawals

logger = logging.getLogger("gshost_agent.sftp")

SFTP_THREADS = 4
LOGIN_TIMEOUT_SECONDS = 30
MAX_SESSIONS = 500  # open at once on the node; more are refused until some end
MAX_CONNECTIONS = 1000  # SSH connections, logged in or still logging in


class Reporter(Protocol):
    def __call__(self, server_id: str, kind: ReportKind, details: dict[str, Any]) -> None: ...


class SftpService:
    def __init__(
        self,
        *,
        host: str,
        port: int,
        key_directory: Path,
        files: FileSpaces,
        withdrawals: Withdrawals,
        ask: Ask,
        report: Reporter,
    ) -> None:
        self.host, self.port = host, port
        self._report = report
        self._key_directory = key_directory
        self._files = files
        self._withdrawals, self._ask = withdrawals, ask
        self.fingerprint: str | None = None
        self.listening_port: int | None = None  # None: SFTP is not served
        self.sessions: set[JailedSftp] = set()
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._pool = ThreadPoolExecutor(SFTP_THREADS, thread_name_prefix="sftp")
        self._gate = ConnectionGate(MAX_CONNECTIONS)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unsubscribe: Any = None

    async def start(self) -> None:
        if not self.port:
            logger.info("SFTP: off (AGENT_SFTP_PORT=0)")
            return
        logging.getLogger("asyncssh").setLevel(logging.WARNING)  # our own lines say enough
        key = await asyncio.to_thread(host_key, self._key_directory)
        self.fingerprint = fingerprint(key)
        self._loop = asyncio.get_running_loop()
        self._unsubscribe = self._withdrawals.subscribe(self._withdrawn)
        try:
            self._acceptor = await asyncssh.create_server(
                lambda: SftpLogins(self._ask, self._gate),
                self.host,
                self.port,
                server_host_keys=[key],
                sftp_factory=self._session,
                sftp_version=3,
                allow_scp=False,
                agent_forwarding=False,
                x11_forwarding=False,
                login_timeout=LOGIN_TIMEOUT_SECONDS,
                kbdint_auth=False,
            )
        except OSError as error:
            logger.error("SFTP: cannot listen on %s:%s (%s)", self.host, self.port, error)
            return
        self.listening_port = self.port
        logger.info("SFTP on %s:%s, host key %s", self.host, self.port, self.fingerprint)

    def _session(self, chan: asyncssh.SSHServerChannel) -> asyncssh.SFTPServer:
        login = chan.get_connection().get_extra_info(EXTRA_INFO)
        if not isinstance(login, Login):  # an SSH login without ours: never served
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "no login")
        session = JailedSftp(
            chan,
            login=login,
            jail=lambda: self._jail(login),
            room=lambda jail: self._files.room_bytes(login.server_id, jail, login.disk_mb),
            pool=self._pool,
            ended=self._ended,
            noted=self._noted,
        )
        refused = self._withdrawals.refuses(
            server_id=login.server_id,
            issued_at=login.at,
            key_id=login.key_id,
            person_id=login.person_id,
        )
        if refused or len(self.sessions) >= MAX_SESSIONS:
            logger.info("%s: SFTP session refused (%s)", login.server_id, refused or "full")
            session.end()
        else:
            self.sessions.add(session)
        return session

    def _noted(self, login: Login, change: str, paths: tuple[str, ...]) -> None:
        """A change made over SFTP, reported (through the outbox) for the audit."""
        details = {"person_id": login.person_id, "change": change, "paths": paths}
        self._report(login.server_id, ReportKind.FILES_CHANGED, details)

    async def _jail(self, login: Login) -> Jail:
        """The server's files (its directory made, with its filesystem, when it has none)."""
        files, server_id, game, disk_mb = self._files, login.server_id, login.game, login.disk_mb
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, lambda: files.jail(server_id, game, disk_mb)
        )

    def _ended(self, session: JailedSftp) -> None:
        self.sessions.discard(session)

    def _withdrawn(self, withdrawal: Withdrawal) -> None:
        """A withdrawal (from any thread): the sessions it covers end on the event loop."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._end_covered, withdrawal)

    def _end_covered(self, withdrawal: Withdrawal) -> None:
        for session in list(self.sessions):
            login = session.login
            if withdrawal.covers(
                server_id=login.server_id, key_id=login.key_id, person_id=login.person_id
            ):
                logger.info("%s: SFTP session ended (%s)", login.server_id, withdrawal.reason)
                self.sessions.discard(session)
                session.end()

    async def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
        for session in list(self.sessions):
            session.end()
        self.sessions.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
