"""The agent's client of the control plane: `POST /internal/nodes/...` with the node token.

HTTPS verified against AGENT_CONTROL_CA (default the system's CAs); plain http only for a
loopback host (the configuration refuses anything else); no proxy from the environment.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

import aiohttp

from gshost_agent import __version__
from gshost_agent.bucket import UploadError
from gshost_agent.config import Config
from gshost_agent.protocol import (
    BACKUP_PARTS_ROUTE,
    CONSOLE_COMMAND_ROUTE,
    HEARTBEAT_ROUTE,
    REPORTS_ROUTE,
    Heartbeat,
    HeartbeatAnswer,
    PartUrls,
    PartUrlsRequest,
    ProtocolError,
)

TIMEOUT = aiohttp.ClientTimeout(total=10, connect=5)


class ControlClient:
    def __init__(self, config: Config) -> None:
        self.base_url = config.control_url
        self._token = config.token
        self._ssl = ssl.create_default_context(
            cafile=str(config.control_ca) if config.control_ca else None
        )
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=4),
                timeout=TIMEOUT,
                trust_env=False,
                headers={
                    "Authorization": f"Bearer {self._token}",
                    "User-Agent": f"gshost-agent/{__version__}",
                },
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def post(self, path: str, body: dict[str, Any]) -> int:
        async with self.session().post(
            self.base_url + path, json=body, allow_redirects=False
        ) as answer:
            await answer.read()
            return answer.status

    async def post_report(self, body: dict[str, Any]) -> int:
        """A report as its outbox keeps it (`Report.to_json()`)."""
        return await self.post(REPORTS_ROUTE, body)

    async def post_for_answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """The status and the JSON answer (None where it is not JSON)."""
        async with self.session().post(
            self.base_url + path, json=body, allow_redirects=False
        ) as answer:
            raw = await answer.read()
        try:
            return answer.status, json.loads(raw) if raw else None
        except ValueError:
            return answer.status, None

    async def heartbeat(self, heartbeat: Heartbeat) -> tuple[int, HeartbeatAnswer | None]:
        """The answer's status, and the answer of a 200 (None when it is not one)."""
        async with self.session().post(
            self.base_url + HEARTBEAT_ROUTE, json=heartbeat.to_json(), allow_redirects=False
        ) as answer:
            raw = await answer.read()
        if answer.status != 200:
            return answer.status, None
        try:
            return answer.status, HeartbeatAnswer.from_json(json.loads(raw))
        except ValueError:  # ProtocolError too
            return answer.status, None

    async def console_command(self, body: dict[str, Any]) -> tuple[int, Any]:
        """A command typed into a console socket, for the control plane to send (or refuse)."""
        return await self.post_for_answer(CONSOLE_COMMAND_ROUTE, body)

    async def sftp_auth(self, body: dict[str, Any]) -> tuple[int, Any]:
        """The control plane's answer to an SFTP login: its status and JSON body (None when
        the body is not JSON)."""
        async with self.session().post(
            self.base_url + "/api/node/v1/sftp-auth", json=body, allow_redirects=False
        ) as answer:
            try:
                return answer.status, await answer.json(content_type=None)
            except ValueError:
                return answer.status, None

    async def backup_part_urls(self, backup_id: str, first: int, count: int) -> list[str]:
        """Presigned URLs of parts `first`.. of the backup's upload (UploadError if refused)."""
        asked = PartUrlsRequest(backup_id=backup_id, first=first, count=count)
        try:
            async with self.session().post(
                self.base_url + BACKUP_PARTS_ROUTE, json=asked.to_json(), allow_redirects=False
            ) as answer:
                status = answer.status
                given = await answer.json(content_type=None) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            why = f"the control plane gave no part URLs ({type(error).__name__})"
            raise UploadError(why) from error
        try:
            return list(PartUrls.from_json(given).urls)
        except ProtocolError:
            raise UploadError(f"the control plane gave no part URLs ({status})") from None
