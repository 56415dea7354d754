"""The agent's client of the control plane: `POST /internal/nodes/...` with the node token.

HTTPS verified against AGENT_CONTROL_CA (default the system's CAs); plain http only for a
loopback host (the configuration refuses anything else); no proxy from the environment.
"""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp

from gshost_agent import __version__
from gshost_agent.bucket import UploadError
from gshost_agent.config import Config

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
        return await self.post("/internal/nodes/reports", body)

    async def heartbeat(self, body: dict[str, Any]) -> int:
        return await self.post("/internal/nodes/heartbeat", body)

    async def backup_part_urls(self, backup_id: str, first: int, count: int) -> list[str]:
        """Presigned URLs of parts `first`.. of the backup's upload (UploadError if refused)."""
        body = {"backup_id": backup_id, "first": first, "count": count}
        try:
            async with self.session().post(
                self.base_url + "/internal/nodes/backup-parts", json=body, allow_redirects=False
            ) as answer:
                status = answer.status
                given = await answer.json(content_type=None) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            why = f"the control plane gave no part URLs ({type(error).__name__})"
            raise UploadError(why) from error
        urls = given.get("urls") if isinstance(given, dict) else None
        if not isinstance(urls, list) or not all(isinstance(url, str) for url in urls):
            raise UploadError(f"the control plane gave no part URLs ({status})")
        return urls
