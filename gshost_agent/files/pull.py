"""A customer's pull: a file fetched from an http(s) URL into the server directory.

The address is checked where the connection is made: names are resolved by a resolver that
keeps only public addresses (gshost_agent.addresses, the rules webhook deliveries apply), an
address literal is checked before any connection, and redirects are followed by hand, each
new URL checked the same way, at most 5. No proxy from the environment is used. Networks in
`AGENT_PULL_ALLOWED_NETWORKS` (a test's own web server) are let through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from gshost_agent.addresses import is_public_ip, is_public_name
from gshost_agent.files.jail import DiskFull, Entry, Jail, JailError, normalize

MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)
CHUNK = 1 << 20
CONNECT_SECONDS = 10
READ_SECONDS = 60


class PullRefused(JailError):
    status, code = 422, "invalid_url"

    def __init__(self, message: str, reason: str, path: str = "") -> None:
        super().__init__(message, path)
        self.reason = reason


class PullFailed(JailError):
    status, code = 502, "pull_failed"


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Addresses:
    def __init__(self, allowed: Iterable[str] = ()) -> None:
        self.allowed: tuple[Network, ...] = tuple(ipaddress.ip_network(n) for n in allowed)

    def reachable(self, text: str) -> bool:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        return is_public_ip(address) or any(address in network for network in self.allowed)

    def check_url(self, url: str) -> None:
        """Refuses a URL that is not http(s) or names a non-public host (before connecting)."""
        try:
            parts = urlsplit(url)
            host = parts.hostname or ""
            parts.port  # noqa: B018 (checks the port)
        except ValueError:
            raise PullRefused("a malformed URL", "malformed_url") from None
        if parts.scheme not in ("http", "https"):
            raise PullRefused("only http:// and https:// URLs are pulled", "scheme_not_allowed")
        if not host or parts.username is not None or any(c in url for c in " \t\r\n\\"):
            raise PullRefused("a malformed URL", "malformed_url")
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            if not self.reachable(host):
                raise PullRefused(f"{host} is not a public address", "private_address")
            return
        if not is_public_name(host) and not self.allowed:
            raise PullRefused(f"{host!r} is not a public host name", "private_address")


class PublicResolver(AbstractResolver):
    """Names resolved to public addresses only: what aiohttp connects to is what was checked."""

    def __init__(self, addresses: Addresses) -> None:
        self.addresses = addresses
        self.inner = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self.inner.resolve(host, port, family)
        public = [entry for entry in found if self.addresses.reachable(entry["host"])]
        if not public:
            raise PullRefused(f"{host!r} resolves to no public address", "private_address")
        return public

    async def close(self) -> None:
        await self.inner.close()


async def pull(jail: Jail, url: str, path: str, *, room_bytes: int, addresses: Addresses) -> Entry:
    """The body of `url` at `path` (or, when `path` is a directory, at the URL's last name
    inside it), written atomically: a failed pull leaves nothing."""
    connector = aiohttp.TCPConnector(resolver=PublicResolver(addresses), use_dns_cache=False)
    timeout = aiohttp.ClientTimeout(sock_connect=CONNECT_SECONDS, sock_read=READ_SECONDS)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, trust_env=False
    ) as session:
        for _ in range(MAX_REDIRECTS + 1):
            addresses.check_url(url)
            try:
                async with session.get(url, allow_redirects=False) as response:
                    if response.status in REDIRECTS and "Location" in response.headers:
                        url = urljoin(url, response.headers["Location"])
                        continue
                    if response.status != 200:
                        raise PullFailed(f"the URL answered {response.status}", path)
                    target = await asyncio.to_thread(_target, jail, path, url)
                    return await _save(jail, target, response, room_bytes)
            except aiohttp.ClientError as error:
                raise PullFailed(f"the URL could not be fetched: {error}", path) from None
    raise PullRefused(f"more than {MAX_REDIRECTS} redirects", "too_many_redirects")


def _target(jail: Jail, path: str, url: str) -> str:
    try:
        is_directory = jail.stat(path).type == "directory"
    except JailError as error:
        if error.code != "file_not_found":
            raise
        is_directory = False
    if not is_directory:
        return normalize(path)
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1]) or "download"
    if name in (".", "..") or "/" in name or "\x00" in name:
        name = "download"
    return normalize(f"{path}/{name}")


async def _save(jail: Jail, target: str, response: Any, room_bytes: int) -> Entry:
    length = response.content_length
    if length is not None and length > room_bytes:
        raise DiskFull(f"the file is {length} bytes; the server's disk has {room_bytes} left")
    file = await asyncio.to_thread(jail.open_write, target, atomic=True)
    written = 0
    try:
        async for chunk in response.content.iter_chunked(CHUNK):
            written += len(chunk)
            if written > room_bytes:
                raise DiskFull("the server's disk limit is reached", target)
            await asyncio.to_thread(file.write, chunk)
    except BaseException:
        await asyncio.to_thread(file.discard)
        raise
    await asyncio.to_thread(file.close)
    return await asyncio.to_thread(jail.stat, target)
