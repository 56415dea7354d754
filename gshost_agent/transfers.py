"""A server's data moved from this node to another (docs/agent-protocol.md, "Transfers").

The control plane gives both agents one short-lived transfer token. The target is told to
expect the server (it keeps only the token's SHA-256, in memory); the source archives the
stopped server's directory (a streamed tar.gz, hashed as it is written, as a backup is) and
uploads it to the target with that token and the archive's SHA-256. The target writes it to
`<data>/transfers/`, checks the SHA-256, and extracts it into a staging directory there; only
the control plane's `commit` makes it the server's directory. Nothing in `<data>/transfers/`
outlives the agent: it is emptied at every start (a token is forgotten with the process).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import hmac
import os
import shutil
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from gshost_agent import archives, bucket
from gshost_agent.data_jobs import SERVER_FILE
from gshost_agent.keeper import write_json_atomically
from gshost_agent.layout import Layout
from gshost_agent.protocol import ArchiveReceipt, ServerState, transfer_route
from gshost_agent.server_state import DEFAULT_DISK_MB, InvalidState
from gshost_agent.templates import GameCatalog

ARCHIVE_SHA256_HEADER = "X-Archive-SHA256"
LONGEST_VALIDITY_SECONDS = 3600
UPLOAD_CONNECT_SECONDS = 5.0
UPLOAD_READ_SECONDS = 120.0  # the target checks and extracts before it answers
DISK_FULL = "the node's disk is full"
# gzip level 0 (stored, not deflated): the move is downtime, and a LAN outruns zlib.
TRANSFER_LEVEL = 0
# A tar's headers and padding beside its content: 1 KiB a file at most, and some slack.
ARCHIVE_OVERHEAD_BYTES = 64 << 20


class TransferError(Exception):
    """The transfer cannot be done; `status` and `code` are the API's answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


@dataclass
class Incoming:
    """A server this node expects (or has received, `received`), not yet its own."""

    server_id: str
    token_hash: bytes
    game: str
    expires_at: float
    disk_mb: int = DEFAULT_DISK_MB  # the server's plan: a bigger content is refused
    uploading: bool = False
    received: archives.Archived | None = None


class Transfers:
    def __init__(self, layout: Layout, catalog: GameCatalog) -> None:
        self.layout = layout
        self.catalog = catalog
        self.root = layout.transfers
        self.incoming: dict[str, Incoming] = {}

    def prepare(self) -> list[str]:
        """An empty `<data>/transfers/` (what an earlier agent left is of no use: its tokens
        are gone). What was removed, for the log."""
        self.root.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.root, 0o700)
        left = sorted(entry.name for entry in self.root.iterdir())
        for name in left:
            _remove(self.root / name)
        return left

    def _partial(self, server_id: str) -> Path:
        return self.root / f"{server_id}.incoming.tar.gz"

    def _staging(self, server_id: str) -> Path:
        return self.root / server_id

    # The target's side ------------------------------------------------------------------------

    def expect(
        self,
        server_id: str,
        token: str,
        game: str,
        valid_seconds: int,
        disk_mb: int = DEFAULT_DISK_MB,
    ) -> None:
        self.catalog.get(game)  # UnknownGame: refused before anything is noted
        if self.layout.server_dir(server_id).exists():
            raise TransferError(409, "invalid_state", "this node already has that server")
        if server_id in self.incoming:
            self.discard(server_id)
        seconds = min(max(valid_seconds, 1), LONGEST_VALIDITY_SECONDS)
        self.incoming[server_id] = Incoming(
            server_id, token_hash(token), game, time.monotonic() + seconds, disk_mb
        )

    def authorised(self, server_id: str, token: str) -> Incoming:
        """The expected transfer this token opens; 401 for any other token (constant time)."""
        incoming = self.incoming.get(server_id)
        expected = incoming.token_hash if incoming else token_hash("")
        if incoming is None or not hmac.compare_digest(token_hash(token), expected):
            raise TransferError(401, "unauthorized", "a valid transfer token is required")
        if time.monotonic() > incoming.expires_at:
            self.discard(server_id)
            raise TransferError(401, "unauthorized", "the transfer token has expired")
        return incoming

    async def receive(
        self, incoming: Incoming, body: aiohttp.StreamReader, length: int, sha256: str
    ) -> archives.Archived:
        """The archive, written and hashed as it comes, checked, then extracted into staging."""
        if incoming.uploading or incoming.received is not None:
            raise TransferError(409, "invalid_state", "that transfer has already been sent")
        limit = incoming.disk_mb << 20
        if length > limit + ARCHIVE_OVERHEAD_BYTES:  # stored, not deflated: about its content
            raise TransferError(409, "disk_limit_exceeded", str(archives.TooBig(limit)))
        if shutil.disk_usage(self.root).free < length:
            raise TransferError(507, "insufficient_storage", DISK_FULL)
        incoming.uploading = True
        partial, staging = self._partial(incoming.server_id), self._staging(incoming.server_id)
        try:
            archived = await _write_body(body, partial)
            if not hmac.compare_digest(archived.sha256, sha256.lower()):
                raise TransferError(422, "checksum_mismatch", "the archive's SHA-256 differs")
            swap = self._swap(incoming)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, _unpack, partial, staging, limit, swap)
        except BaseException:
            self._swap(incoming).discard(staging)
            incoming.uploading = False
            raise
        finally:
            _remove(partial)
        incoming.uploading, incoming.received = False, archived
        return archived

    async def fetch(self, server_id: str, url: str, expected: archives.Archived) -> None:
        """The archive of an expected server, fetched from the bucket (a presigned GET),
        extracted into staging as it comes and checked (SHA-256 and size) before `commit`
        may adopt it."""
        incoming = self.incoming.get(server_id)
        if incoming is None:
            raise TransferError(409, "invalid_state", "this node does not expect that server")
        if incoming.uploading or incoming.received is not None:
            raise TransferError(409, "invalid_state", "that transfer has already been sent")
        if shutil.disk_usage(self.root).free < expected.size_bytes:
            raise TransferError(507, "insufficient_storage", DISK_FULL)
        incoming.uploading = True
        staging = self._staging(server_id)
        swap = self._swap(incoming)
        try:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, _fetch_into, url, expected, staging, swap)
        except BaseException:
            swap.discard(staging)
            incoming.uploading = False
            raise
        incoming.uploading, incoming.received = False, expected

    def commit(self, server_id: str) -> None:
        """The received copy becomes the server's directory (not started)."""
        incoming = self.incoming.get(server_id)
        if incoming is None or incoming.received is None:
            raise TransferError(409, "invalid_state", "no received transfer of that server")
        if self.layout.server_dir(server_id).exists():
            raise TransferError(409, "invalid_state", "this node already has that server")
        directory = self.layout.server_dir(server_id)
        self._swap(incoming).swap_in(self._staging(server_id), directory)
        gid = self.layout.prepare_server(server_id, incoming.disk_mb)
        run_dir = self.layout.prepare_run_dir(server_id)
        if gid is not None:
            archives.own(directory, (gid, gid))  # the server's own uid and gid on this node
        write_json_atomically(run_dir / SERVER_FILE, {"game": incoming.game})
        del self.incoming[server_id]

    def _swap(self, incoming: Incoming) -> archives.Swap:
        return self.layout.swap(incoming.server_id, incoming.disk_mb)

    def discard(self, server_id: str) -> None:
        """Whatever this node expected or received of the server: forgotten."""
        incoming = self.incoming.pop(server_id, None)
        _remove(self._partial(server_id))
        if incoming is not None:
            self._swap(incoming).discard(self._staging(server_id))
        _remove(self._staging(server_id))

    # The source's side ------------------------------------------------------------------------

    async def send(
        self, server_id: str, state: ServerState, target_url: str, ca_pem: str, token: str
    ) -> archives.Archived:
        """The stopped server's directory, archived and uploaded to the target."""
        if state != ServerState.STOPPED:
            raise InvalidState(state)
        directory = self.layout.server_dir(server_id)
        if not directory.is_dir():
            raise TransferError(404, "server_not_found", "this node has no data of that server")
        archive = self.root / f"{server_id}.outgoing.tar.gz"
        loop = asyncio.get_running_loop()
        try:
            archived = await loop.run_in_executor(
                None, archives.write_backup, directory, archive, lambda done: None, TRANSFER_LEVEL
            )
            await _upload(archive, archived, target_url.rstrip("/"), server_id, ca_pem, token)
        except OSError as error:
            if error.errno == errno.ENOSPC:
                raise TransferError(507, "insufficient_storage", DISK_FULL) from error
            raise TransferError(502, "transfer_failed", f"{error.strerror or error}") from error
        finally:
            _remove(archive)
        return archived

    def remove_copy(self, server_id: str) -> None:
        """The server's directory and run state on this node, gone (after it moved elsewhere).
        Its backups stay: they are archives the customer made, not the server's copy."""
        self.layout.remove_server(server_id)
        for path in (self.layout.run_dir(server_id), self.layout.samples / f"{server_id}.jsonl"):
            _remove(path)


async def _write_body(body: aiohttp.StreamReader, partial: Path) -> archives.Archived:
    # Gathered in CHUNK-sized writes; the page cache takes them without blocking the loop long.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    descriptor = os.open(partial, flags, 0o600)
    digest, size, pending = hashlib.sha256(), 0, bytearray()
    try:
        async for piece in body.iter_any():
            pending += piece
            if len(pending) >= archives.CHUNK:
                digest.update(pending)
                _write_all(descriptor, pending)
                size, pending = size + len(pending), bytearray()
        digest.update(pending)
        _write_all(descriptor, pending)
        size += len(pending)
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise TransferError(507, "insufficient_storage", DISK_FULL) from error
        raise
    finally:
        os.close(descriptor)
    return archives.Archived(size_bytes=size, sha256=digest.hexdigest())


def _write_all(descriptor: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]


def _unpack(archive: Path, staging: Path, limit_bytes: int, swap: archives.Swap) -> None:
    swap.make(staging)
    try:
        archives.unpack(archive, staging, limit_bytes)
    except archives.TooBig as error:
        raise TransferError(409, "disk_limit_exceeded", str(error)) from error
    except archives.ArchiveError as error:
        raise TransferError(422, "invalid_archive", str(error)) from error
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise TransferError(507, "insufficient_storage", DISK_FULL) from error
        raise


async def _upload(
    archive: Path,
    archived: archives.Archived,
    target_url: str,
    server_id: str,
    ca_pem: str,
    token: str,
) -> None:
    verify: ssl.SSLContext = (
        ssl.create_default_context(cadata=ca_pem) if ca_pem else ssl.create_default_context()
    )
    timeout = aiohttp.ClientTimeout(
        sock_connect=UPLOAD_CONNECT_SECONDS, sock_read=UPLOAD_READ_SECONDS
    )
    headers = {
        "Authorization": f"Bearer {token}",
        ARCHIVE_SHA256_HEADER: archived.sha256,
        "Content-Length": str(archived.size_bytes),
        "Content-Type": "application/gzip",
    }
    url = target_url + transfer_route(server_id, "archive")
    try:
        async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
            body = _read_chunks(archive)
            async with session.put(url, data=body, headers=headers, ssl=verify) as answer:
                if answer.status >= 300:
                    raise TransferError(502, "transfer_failed", await _refusal(answer))
                received = await _receipt(answer)
    except (TimeoutError, aiohttp.ClientError, ssl.SSLError) as error:
        why = f"the target did not take the archive ({type(error).__name__})"
        raise TransferError(502, "transfer_failed", why) from error
    # Committed only on the target's word that it holds these very bytes.
    if received != (archived.size_bytes, archived.sha256):
        why = "the target's copy differs from the archive sent (its SHA-256 or size)"
        raise TransferError(502, "transfer_failed", why)


async def _receipt(answer: aiohttp.ClientResponse) -> tuple[int, str] | None:
    """The size and SHA-256 the target says it received, or None when it says neither."""
    try:
        receipt = ArchiveReceipt.from_json(await answer.json(content_type=None))
    except (ValueError, aiohttp.ClientError):  # ProtocolError too
        return None
    return receipt.size_bytes, receipt.sha256


async def _read_chunks(archive: Path) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    with archive.open("rb") as source:
        while chunk := await loop.run_in_executor(None, source.read, archives.CHUNK):
            yield chunk


async def _refusal(answer: aiohttp.ClientResponse) -> str:
    with contextlib.suppress(Exception):
        error = (await answer.json())["error"]
        return f"the target refused the archive: {str(error['message'])[:200]}"
    return f"the target refused the archive ({answer.status})"


def _fetch_into(url: str, expected: archives.Archived, staging: Path, swap: archives.Swap) -> None:
    swap.make(staging)
    try:
        download = bucket.Download(url)
    except bucket.UploadError as error:
        raise TransferError(502, "transfer_failed", str(error)) from error
    try:
        archives.unpack_stream(download.answer, expected, staging)
    except archives.ArchiveError as error:
        raise TransferError(422, "checksum_mismatch", str(error)) from error
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise TransferError(507, "insufficient_storage", DISK_FULL) from error
        raise TransferError(502, "transfer_failed", f"{error.strerror or error}") from error
    finally:
        download.close()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
