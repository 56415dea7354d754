"""The agent's file routes (docs/files.md lists them), all through the server's Jail.

Called by the control plane with the node token, under `/v1/servers/{id}/files`; each names
the server's `game` and `disk_mb` in its query string (the control plane owns the plan). The
download and upload links (`/v1/file-links/{token}`) are called by a customer's browser or
client instead: the link's single-use token is their credential.

Work that may take long (an archive made or unpacked, a pull) answers when it is done, or after
`FINISH_SECONDS` with 202 `{"state": "running"}` while it goes on: a control plane's call never
waits longer than its bound for an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any
from urllib.parse import quote

from aiohttp import BodyPartReader, web

from gshost_agent.files import archives
from gshost_agent.files.jail import (
    DiskFull,
    Entry,
    FileDenied,
    Jail,
    JailError,
    NotADirectory,
    PathOutside,
    normalize,
)
from gshost_agent.files.pull import PullRefused, pull
from gshost_agent.files.spaces import FileSpaces
from gshost_agent.protocol import format_time
from gshost_agent.templates import UnknownGame

CONTENT_LIMIT = 8 * 1024 * 1024
CHUNK = 1 << 20
LIST_DEFAULT, LIST_MOST = 200, 1000
MAX_PATHS = 1000
FINISH_SECONDS = 8.0
DISK_MB_MOST = 1 << 24
FILE_CONTENT_WRITE = "file-content-write"
FILE_LINK_DOWNLOAD = "file-link-download"
FILE_LINK_UPLOAD = "file-link-upload"
LINK_ROUTES = frozenset({FILE_LINK_DOWNLOAD, FILE_LINK_UPLOAD})
SPACES: web.AppKey[FileSpaces] = web.AppKey("file_spaces", FileSpaces)
_AFTER = re.compile(r"^[01]:.+$", re.DOTALL)
_background: set[asyncio.Task[Any]] = set()
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def routes(server: str) -> list[web.RouteDef]:
    files = f"{server}/files"
    return [
        web.get(files, list_view),
        web.get(f"{files}/content", read_view),
        web.put(f"{files}/content", write_view, name=FILE_CONTENT_WRITE),
        web.post(f"{files}/rename", rename_view),
        web.post(f"{files}/copy", copy_view),
        web.post(f"{files}/directory", directory_view),
        web.post(f"{files}/delete", delete_view),
        web.post(f"{files}/compress", compress_view),
        web.post(f"{files}/decompress", decompress_view),
        web.post(f"{files}/pull", pull_view),
        web.post(f"{files}/download-link", download_link_view),
        web.post(f"{files}/upload-link", upload_link_view),
        web.get("/v1/file-links/{token}", link_download_view, name=FILE_LINK_DOWNLOAD),
        web.post("/v1/file-links/{token}", link_upload_view, name=FILE_LINK_UPLOAD),
    ]


def body_limit(route_name: str | None, default: int) -> int | None:
    """The most a route's body may hold (None: no limit, the body is streamed)."""
    if route_name == FILE_CONTENT_WRITE:
        return CONTENT_LIMIT
    if route_name == FILE_LINK_UPLOAD:
        return None
    return default


def failure(status: int, code: str, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message, **extra}}, status=status)


def refused(error: JailError) -> web.Response:
    extra: dict[str, Any] = {"path": error.path} if error.path else {}
    if isinstance(error, PullRefused):
        extra["reason"] = error.reason
    return failure(error.status, error.code, error.message, **extra)


def jailed(view: Handler) -> Handler:
    async def run(request: web.Request) -> web.StreamResponse:
        try:
            return await view(request)
        except JailError as error:
            return refused(error)
        except UnknownGame as error:
            return failure(400, "invalid_request", f"unknown game {error}")
        except _Invalid as error:
            return failure(400, "invalid_request", str(error))

    run.__name__ = view.__name__
    return run


class _Invalid(ValueError):
    pass


class Space:
    """One request's view of a server's files."""

    def __init__(
        self, spaces: FileSpaces, server_id: str, game: str, jail: Jail, disk_mb: int
    ) -> None:
        self.spaces, self.server_id, self.game = spaces, server_id, game
        self.jail, self.disk_mb = jail, disk_mb

    async def room(self) -> int:
        spaces = self.spaces
        return await asyncio.to_thread(spaces.room_bytes, self.server_id, self.jail, self.disk_mb)


async def space_of(request: web.Request, server_id: str | None = None) -> Space:
    from gshost_agent.api import server_id_of  # the agent's API module registers these routes

    server_id = server_id or server_id_of(request)
    game = request.query.get("game", "")
    if not game:
        raise _Invalid("game: the server's game is required")
    disk_mb = _number(request.query.get("disk_mb", ""), "disk_mb", 1, DISK_MB_MOST)
    spaces = request.app[SPACES]
    jail = await asyncio.to_thread(spaces.jail, server_id, game, disk_mb)
    return Space(spaces, server_id, game, jail, disk_mb)


def _number(value: str, name: str, least: int, most: int) -> int:
    if not (value.isascii() and value.isdigit() and len(value) <= 19) or not (
        least <= int(value) <= most
    ):
        raise _Invalid(f"{name}: a whole number from {least} to {most}")
    return int(value)


def _path(request: web.Request, name: str = "path") -> str:
    value = request.query.get(name)
    if value is None:
        raise _Invalid(f"{name}: a path is required")
    return normalize(value)


async def _body(request: web.Request) -> dict[str, Any]:
    from gshost_agent.api import ApiError, json_body

    try:
        return await json_body(request)
    except ApiError as error:
        raise _Invalid(error.message) from None


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise _Invalid(f"{name}: a path is required")
    return normalize(value)


def _texts(body: dict[str, Any], name: str) -> list[str]:
    value = body.get(name)
    if (
        not isinstance(value, list)
        or not 1 <= len(value) <= MAX_PATHS
        or not all(isinstance(item, str) and item for item in value)
    ):
        raise _Invalid(f"{name}: a list of 1 to {MAX_PATHS} paths")
    return [normalize(item) for item in value]


def entry_answer(entry: Entry, status: int = 200) -> web.Response:
    return web.json_response(entry.to_json(), status=status)


async def finish_or_continue(work: Coroutine[Any, Any, dict[str, Any]]) -> web.Response:
    """The work's answer when it ends within FINISH_SECONDS, else 202 while it goes on."""
    task = asyncio.ensure_future(work)
    try:
        answer = await asyncio.wait_for(asyncio.shield(task), FINISH_SECONDS)
    except TimeoutError:
        _background.add(task)
        task.add_done_callback(_background.discard)
        return web.json_response({"state": "running"}, status=202)
    return web.json_response({"state": "done", **answer})


# Routes of the control plane ------------------------------------------------------------------


@jailed
async def list_view(request: web.Request) -> web.Response:
    space = await space_of(request)
    path = _path(request)
    limit = _number(request.query.get("limit", str(LIST_DEFAULT)), "limit", 1, LIST_MOST)
    after = request.query.get("after", "")
    if after and not _AFTER.fullmatch(after):
        raise _Invalid("after: the listing's cursor")
    entries = await asyncio.to_thread(space.jail.list, path)
    if after:
        rank, name = int(after[0]), after[2:]
        entries = [e for e in entries if (_rank(e), e.name) > (rank, name)]
    page = entries[:limit]
    more = len(entries) > limit
    return web.json_response(
        {
            "path": path,
            "results": [entry.to_json() for entry in page],
            "after": f"{_rank(page[-1])}:{page[-1].name}" if more and page else None,
        }
    )


def _rank(entry: Entry) -> int:
    return 0 if entry.type == "directory" else 1


@jailed
async def read_view(request: web.Request) -> web.Response:
    space = await space_of(request)
    path = _path(request)

    def read() -> bytes:
        with space.jail.open_read(path) as file:
            data = file.read(CONTENT_LIMIT + 1)
        if len(data) > CONTENT_LIMIT:
            raise _TooLarge
        return data

    try:
        data = await asyncio.to_thread(read)
    except _TooLarge:
        return failure(413, "file_too_large", "over 8 MiB: use a download link", path=path)
    return web.Response(body=data, content_type="application/octet-stream")


class _TooLarge(Exception):
    pass


@jailed
async def write_view(request: web.Request) -> web.Response:
    space = await space_of(request)
    path = _path(request)
    if request.content_length is not None and request.content_length > CONTENT_LIMIT:
        return failure(413, "file_too_large", "a body holds at most 8 MiB: use an upload link")
    data = bytearray()
    async for chunk in request.content.iter_chunked(CHUNK):
        data += chunk
        if len(data) > CONTENT_LIMIT:
            return failure(413, "file_too_large", "a body holds at most 8 MiB: use an upload link")
    if len(data) > await space.room():
        return refused(DiskFull("the server's disk limit is reached", path))

    def write() -> Entry:
        with space.jail.open_write(path, atomic=True) as file:
            file.write(bytes(data))
        return space.jail.stat(path)

    return entry_answer(await asyncio.to_thread(write))


@jailed
async def rename_view(request: web.Request) -> web.Response:
    space = await space_of(request)
    body = await _body(request)
    source, target = _text(body, "from"), _text(body, "to")
    return entry_answer(await asyncio.to_thread(space.jail.rename, source, target))


@jailed
async def copy_view(request: web.Request) -> web.Response:
    space = await space_of(request)
    path = _text(await _body(request), "path")

    async def work() -> dict[str, Any]:
        found = await asyncio.to_thread(space.jail.stat, path)
        if found.type == "file" and found.size > await space.room():
            raise DiskFull("the server's disk limit is reached", path)
        return (await asyncio.to_thread(space.jail.copy, path)).to_json()

    return await finish_or_continue(work())


@jailed
async def directory_view(request: web.Request) -> web.Response:
    space = await space_of(request)
    path = _text(await _body(request), "path")
    made = await asyncio.to_thread(space.jail.mkdir, path, parents=True)
    return entry_answer(made, status=201)


@jailed
async def delete_view(request: web.Request) -> web.Response:
    space = await space_of(request)
    paths = _texts(await _body(request), "paths")

    def delete() -> list[str]:
        for path in paths:  # what is missing, denied or beyond a link: nothing deleted yet
            found = space.jail.stat(path)
            if space.jail.denied(path, directory=found.type == "directory"):
                raise FileDenied("the server's template does not allow this path", path)
        for path in paths:
            space.jail.delete(path)
        return paths

    return web.json_response({"deleted": await asyncio.to_thread(delete)})


@jailed
async def compress_view(request: web.Request) -> web.Response:
    space = await space_of(request)
    body = await _body(request)
    paths, archive = _texts(body, "paths"), _text(body, "archive")

    async def work() -> dict[str, Any]:
        made = await asyncio.to_thread(archives.compress, space.jail, paths, archive)
        return made.to_json()

    return await finish_or_continue(work())


@jailed
async def decompress_view(request: web.Request) -> web.Response:
    space = await space_of(request)
    body = await _body(request)
    archive, directory = _text(body, "archive"), _text(body, "directory")
    archives.archive_kind(archive)

    async def work() -> dict[str, Any]:
        room = await space.room()
        written = await asyncio.to_thread(archives.extract, space.jail, archive, directory, room)
        return {"directory": directory, "written": len(written)}

    return await finish_or_continue(work())


@jailed
async def pull_view(request: web.Request) -> web.Response:
    space = await space_of(request)
    body = await _body(request)
    url, path = body.get("url"), _text(body, "path")
    if not isinstance(url, str) or not url or len(url) > 8192:
        raise _Invalid("url: an http:// or https:// URL")
    space.spaces.addresses.check_url(url)
    if space.jail.denied(path):
        raise FileDenied("the server's template does not allow this path", path)
    wait = space.spaces.pull_wait(space.server_id)
    if wait:
        answer = failure(429, "rate_limited", "at most 10 pulls per 5 minutes", retry_after=wait)
        answer.headers["Retry-After"] = str(wait)
        return answer

    async def work() -> dict[str, Any]:
        room = await space.room()
        saved = await pull(space.jail, url, path, room_bytes=room, addresses=space.spaces.addresses)
        return saved.to_json()

    return await finish_or_continue(work())


@jailed
async def download_link_view(request: web.Request) -> web.Response:
    space = await space_of(request)
    path = _text(await _body(request), "path")

    def check() -> None:
        with space.jail.open_read(path):
            pass

    await asyncio.to_thread(check)
    return _link_answer(space, "download", path)


@jailed
async def upload_link_view(request: web.Request) -> web.Response:
    space = await space_of(request)
    directory = _text(await _body(request), "directory")
    found = await asyncio.to_thread(space.jail.stat, directory)
    if found.type == "symlink":
        raise PathOutside("the path is a symbolic link", directory)
    if found.type != "directory":
        raise NotADirectory("not a directory", directory)
    return _link_answer(space, "upload", directory)


def _link_answer(space: Space, kind: str, path: str) -> web.Response:
    token, link = space.spaces.links.issue(space.server_id, kind, path, space.game, space.disk_mb)
    return web.json_response(
        {"path": f"/v1/file-links/{token}", "expires_at": format_time(link.expires_at)},
        status=201,
    )


# Links, used by customers' browsers and clients ----------------------------------------------


async def links_open_to_any_page(request: web.Request, answer: web.StreamResponse) -> None:
    """Every answer of a link route, its errors and the agent's own included, may be read by any
    page: the token in the URL is the only credential (no cookie is read). Without it a refusal
    reaches the page as a bare network error."""
    route = request.match_info.route
    if route is not None and route.name in LINK_ROUTES:
        answer.headers["Access-Control-Allow-Origin"] = "*"


async def _link_space(request: web.Request, kind: str) -> tuple[Space, str] | web.Response:
    token = request.match_info["token"]
    link = request.app[SPACES].links.take(token, kind) if len(token) <= 100 else None
    if link is None:
        return failure(404, "link_not_found", "this link is unknown, used or expired")
    spaces = request.app[SPACES]
    jail = await asyncio.to_thread(spaces.jail, link.server_id, link.game, link.disk_mb)
    return Space(spaces, link.server_id, link.game, jail, link.disk_mb), link.path


async def link_download_view(request: web.Request) -> web.StreamResponse:
    found = await _link_space(request, "download")
    if isinstance(found, web.Response):
        return found
    space, path = found
    try:
        file = await asyncio.to_thread(space.jail.open_read, path)
    except JailError as error:
        return refused(error)
    try:
        size = await asyncio.to_thread(lambda: space.jail.stat(path).size)
        answer = web.StreamResponse(
            headers={
                "Content-Type": "application/octet-stream",
                "Content-Length": str(size),
                "Content-Disposition": _attachment(path.rsplit("/", 1)[-1]),
            }
        )
        await answer.prepare(request)
        while chunk := await asyncio.to_thread(file.read, CHUNK):
            await answer.write(chunk)
        await answer.write_eof()
        return answer
    finally:
        await asyncio.to_thread(file.close)


def _attachment(name: str) -> str:
    plain = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name)
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"


async def link_upload_view(request: web.Request) -> web.StreamResponse:
    found = await _link_space(request, "upload")
    if isinstance(found, web.Response):
        return found
    space, directory = found
    try:
        saved = await _receive(request, space, directory)
    except JailError as error:
        return refused(error)
    except ValueError as error:  # not multipart, or a part without a file name
        return failure(400, "invalid_request", str(error))
    return web.json_response({"files": [entry.to_json() for entry in saved]}, status=201)


async def _receive(request: web.Request, space: Space, directory: str) -> list[Entry]:
    if not request.content_type.startswith("multipart/"):
        raise ValueError("the body must be multipart/form-data")
    reader = await request.multipart()
    saved: list[Entry] = []
    room = await space.room()
    written = 0
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader) or not part.filename:
            continue
        name = part.filename.replace("\\", "/").rsplit("/", 1)[-1]
        if name in ("", ".", "..") or "\x00" in name:
            raise ValueError(f"not a file name: {part.filename!r}")
        target = normalize(f"{directory}/{name}")
        file = await asyncio.to_thread(space.jail.open_write, target, atomic=True)
        try:
            while chunk := await part.read_chunk(CHUNK):
                written += len(chunk)
                if written > room:
                    raise DiskFull("the server's disk limit is reached", target)
                await asyncio.to_thread(file.write, chunk)
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(file.discard)
            raise
        await asyncio.to_thread(file.close)
        saved.append(await asyncio.to_thread(space.jail.stat, target))
    if not saved:
        raise ValueError("no file in the form")
    return saved
