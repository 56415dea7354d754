"""The agent's HTTPS API, called by the control plane (docs/agent-protocol.md lists the routes).

Every request is authenticated first (the node token, compared in constant time), before its
server id or its body is looked at; the one exception is another node's upload of a transfer,
authenticated by its transfer token instead (`receive_view`). Errors have one shape:
`{"error": {"code", "message"}}`.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from gshost_agent.archives import Archived
from gshost_agent.data_jobs import SHA256, InvalidJob, job_request
from gshost_agent.keepers import KeeperGone
from gshost_agent.netns import NetworkError, PortTaken
from gshost_agent.node import SERVER_ID, Node
from gshost_agent.protocol import format_time
from gshost_agent.sandbox import SandboxUnavailable
from gshost_agent.server_state import (
    DEFAULT_CPU_PERCENT,
    DEFAULT_DISK_MB,
    DEFAULT_PROCESSES,
    DiskLimitExceeded,
    InvalidCommand,
    InvalidState,
    StartRequest,
)
from gshost_agent.settings_files import InvalidSettings
from gshost_agent.supervisor import Supervisor
from gshost_agent.templates import UnknownGame
from gshost_agent.transfers import ARCHIVE_SHA256_HEADER, TransferError

logger = logging.getLogger("gshost_agent.api")

BODY_LIMIT = 64 * 1024
TRANSFER_UPLOAD = "transfer-upload"
TOKEN_LENGTHS = range(32, 201)
NODE: web.AppKey[Node] = web.AppKey("node", Node)
TOKEN: web.AppKey[str] = web.AppKey("token", str)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error_answer(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as error:
        answer = error_answer(error.status, error.code, error.message)
        if error.status == 401:
            answer.headers["WWW-Authenticate"] = 'Bearer realm="gshost-agent"'
        return answer
    except web.HTTPException as error:
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
        return error_answer(
            error.status, code.get(error.status, "http_error"), error.reason or "error"
        )
    except Exception:
        logger.exception("%s %s failed", request.method, request.path)
        return error_answer(500, "internal_error", "the agent failed; see its log")


@web.middleware
async def authentication(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.match_info.route.name == TRANSFER_UPLOAD:
        return await handler(request)  # another node's upload, with a transfer token of its own
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    expected = request.app[TOKEN]
    # surrogateescape: a header of undecodable bytes is a wrong token, not an error.
    given_bytes = given.encode("utf-8", "surrogateescape")
    if scheme != "Bearer" or not hmac.compare_digest(given_bytes, expected.encode()):
        raise ApiError(401, "unauthorized", "a valid node token is required")
    length = request.content_length
    if length is not None and length > BODY_LIMIT:
        raise ApiError(413, "payload_too_large", f"bodies are limited to {BODY_LIMIT} bytes")
    return await handler(request)


def make_app(node: Node, token: str) -> web.Application:
    app = web.Application(middlewares=[errors, authentication], client_max_size=BODY_LIMIT)
    app[NODE] = node
    app[TOKEN] = token
    server = "/v1/servers/{server_id}"
    app.add_routes(
        [
            web.get("/v1/node", node_view),
            web.post(f"{server}/start", start_view),
            web.post(f"{server}/stop", stop_view),
            web.post(f"{server}/restart", restart_view),
            web.post(f"{server}/kill", kill_view),
            web.post(f"{server}/console", console_write_view),
            web.get(f"{server}/console", console_read_view),
            web.get(f"{server}/players", players_view),
            web.get(f"{server}/stats", stats_view),
            web.get(f"{server}/metrics", metrics_view),
            web.get(f"{server}/settings", settings_view),
            web.put(f"{server}/settings", settings_write_view),
            web.post(f"{server}/jobs", job_view),
            web.post(f"{server}/transfer", send_view),
            web.delete(server, forget_view),
            web.post("/v1/transfers/{server_id}", expect_view),
            web.put("/v1/transfers/{server_id}/archive", receive_view, name=TRANSFER_UPLOAD),
            web.post("/v1/transfers/{server_id}/fetch", fetch_view),
            web.post("/v1/transfers/{server_id}/commit", commit_view),
            web.delete("/v1/transfers/{server_id}", discard_view),
        ]
    )
    return app


def server_id_of(request: web.Request) -> str:
    server_id = request.match_info["server_id"]
    if not SERVER_ID.fullmatch(server_id):
        raise ApiError(404, "not_found", "no such server")
    return server_id


def known_server(request: web.Request) -> Supervisor:
    supervisor = request.app[NODE].known(server_id_of(request))
    if supervisor is None:
        raise ApiError(404, "server_not_found", "this node has never run that server")
    return supervisor


async def json_body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()  # over client_max_size: 413
    try:
        body = json.loads(raw or b"{}")
    except ValueError as error:
        raise ApiError(400, "invalid_request", "the body is not JSON") from error
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request", "the body must be a JSON object")
    return body


# A plan's numbers: (default, least, most).
PLAN_BOUNDS = {
    "memory_mb": (1024, 32, 1 << 20),
    "disk_mb": (DEFAULT_DISK_MB, 1, 1 << 24),
    "cpu_percent": (DEFAULT_CPU_PERCENT, 1, 100 * 1024),
    "processes": (DEFAULT_PROCESSES, 1, 1 << 22),
}


def start_request(body: dict[str, Any]) -> StartRequest:
    game, port, settings = body.get("game"), body.get("port"), body.get("settings", {})
    if not isinstance(game, str):
        raise ApiError(400, "invalid_request", "game: a game name is required")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ApiError(400, "invalid_request", "port: an integer from 1 to 65535")
    if not isinstance(settings, dict):
        raise ApiError(400, "invalid_request", "settings: an object")
    plan = {}
    for name, (default, least, most) in PLAN_BOUNDS.items():
        value = body.get(name, default)
        if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
            raise ApiError(400, "invalid_request", f"{name}: an integer from {least} to {most}")
        plan[name] = value
    return StartRequest(game=game, port=port, settings=settings, **plan)


async def power(action: Awaitable[None], answer_state: str) -> web.Response:
    try:
        await action
    except InvalidState as error:
        raise ApiError(409, "invalid_state", str(error)) from error
    except UnknownGame as error:
        raise ApiError(400, "invalid_request", f"unknown game {error}") from error
    except InvalidSettings as error:
        raise ApiError(400, "invalid_request", str(error)) from error
    except KeeperGone as error:
        raise ApiError(409, "invalid_state", "the game has just ended") from error
    except DiskLimitExceeded as error:
        raise ApiError(409, "disk_limit_exceeded", str(error)) from error
    except SandboxUnavailable as error:
        raise ApiError(409, "sandbox_unavailable", str(error)) from error
    except PortTaken as error:
        raise ApiError(409, "port_in_use", str(error)) from error
    except NetworkError as error:
        raise ApiError(503, "sandbox_failed", str(error)) from error
    return web.json_response({"state": answer_state}, status=202)


async def node_view(request: web.Request) -> web.Response:
    node = request.app[NODE]
    return web.json_response(
        {
            "games": node.games(),
            "servers": node.states(),
            "isolation": node.sandboxing.describe(),
        }
    )


async def start_view(request: web.Request) -> web.Response:
    supervisor, start = await supervisor_and_start(request)
    return await power(supervisor.start(start), "starting")


async def stop_view(request: web.Request) -> web.Response:
    return await power(known_or_stopped(request).stop(), "stopping")


async def restart_view(request: web.Request) -> web.Response:
    supervisor, start = await supervisor_and_start(request)
    return await power(supervisor.restart(start), "restarting")


async def supervisor_and_start(request: web.Request) -> tuple[Supervisor, StartRequest]:
    """The named server's supervisor and the start its body asks for (start and restart)."""
    server_id = server_id_of(request)
    start = start_request(await json_body(request))
    return request.app[NODE].supervisor(server_id), start


async def kill_view(request: web.Request) -> web.Response:
    # The exit that follows is reported as a crash (signal 9): nobody asked it to stop.
    supervisor = known_or_stopped(request)
    return await power(supervisor.kill(), str(supervisor.state))


def known_or_stopped(request: web.Request) -> Supervisor:
    # A server this node never ran is simply not running: 409, as for a stopped one.
    supervisor = request.app[NODE].known(server_id_of(request))
    if supervisor is None:
        raise ApiError(409, "invalid_state", "the server is stopped")
    return supervisor


async def console_write_view(request: web.Request) -> web.Response:
    supervisor = known_or_stopped(request)
    body = await json_body(request)
    try:
        await supervisor.console(body.get("command"))  # type: ignore[arg-type]
    except InvalidCommand as error:
        raise ApiError(400, "invalid_request", f"command: {error}") from error
    except (InvalidState, KeeperGone) as error:
        raise ApiError(409, "invalid_state", "the server is not running") from error
    return web.json_response({"accepted": True})


async def console_read_view(request: web.Request) -> web.Response:
    supervisor = known_server(request)
    after = query_number(request, "after", "0", 0, 1 << 62)
    return web.json_response(supervisor.console_after(after))


async def players_view(request: web.Request) -> web.Response:
    return web.json_response(await known_server(request).players())


async def stats_view(request: web.Request) -> web.Response:
    return web.json_response(known_server(request).stats())


async def metrics_view(request: web.Request) -> web.Response:
    supervisor = known_server(request)
    now = datetime.now(UTC).timestamp()
    start = iso_time(request.query.get("start"), "start", now - 3600)
    end = iso_time(request.query.get("end"), "end", now)
    step = query_number(request, "step", "60", 1, 86400)
    if end < start:
        raise ApiError(400, "invalid_request", "start must not be after end")
    samples = supervisor.samples.between(start, end, step)
    return web.json_response(
        {
            "samples": [
                {
                    "at": format_time(s.at),
                    "cpu_percent": s.cpu_percent,
                    "memory_mb": s.memory_mb,
                    "players_online": s.players_online,
                }
                for s in samples
            ]
        }
    )


def query_number(request: web.Request, name: str, default: str, least: int, most: int) -> int:
    """A whole number from the query string, from `least` to `most`; else 400 (never 500)."""
    value = request.query.get(name, default)
    if not (value.isascii() and value.isdigit() and len(value) <= 19) or not (
        least <= int(value) <= most
    ):
        raise ApiError(400, "invalid_request", f"{name}: a whole number from {least} to {most}")
    return int(value)


def iso_time(value: str | None, name: str, default: float) -> float:
    if value is None:
        return default
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            raise ApiError(400, "invalid_request", f"{name}: a time with its offset")
        return parsed.timestamp()
    except (ValueError, OverflowError) as error:
        raise ApiError(400, "invalid_request", f"{name}: an ISO 8601 time") from error


async def settings_view(request: web.Request) -> web.Response:
    return web.json_response({"settings": known_server(request).settings()})


async def settings_write_view(request: web.Request) -> web.Response:
    server_id = server_id_of(request)
    body = await json_body(request)
    game, settings = body.get("game"), body.get("settings")
    if not isinstance(game, str):
        raise ApiError(400, "invalid_request", "game: a game name is required")
    if not isinstance(settings, dict):
        raise ApiError(400, "invalid_request", "settings: an object")
    supervisor = request.app[NODE].supervisor(server_id)
    try:
        written = supervisor.put_settings(game, settings)
    except InvalidState as error:
        raise ApiError(409, "invalid_state", str(error)) from error
    except UnknownGame as error:
        raise ApiError(400, "invalid_request", f"unknown game {error}") from error
    except InvalidSettings as error:
        raise ApiError(400, "invalid_request", str(error)) from error
    return web.json_response({"settings": written})


async def job_view(request: web.Request) -> web.Response:
    server_id = server_id_of(request)
    try:
        job = job_request(await json_body(request))
    except InvalidJob as error:
        raise ApiError(400, "invalid_request", str(error)) from error
    supervisor = request.app[NODE].supervisor(server_id)
    try:
        await supervisor.run_job(job)
    except InvalidState as error:
        raise ApiError(409, "invalid_state", str(error)) from error
    except UnknownGame as error:
        raise ApiError(400, "invalid_request", f"unknown game {error}") from error
    except InvalidSettings as error:
        raise ApiError(400, "invalid_request", str(error)) from error
    return web.json_response({"job_id": job.job_id}, status=202)


# Transfers of a server's data between nodes (gshost_agent.transfers) --------------------------


def transfer_token(body: dict[str, Any]) -> str:
    token = body.get("token")
    if not isinstance(token, str) or len(token) not in TOKEN_LENGTHS:
        raise ApiError(400, "invalid_request", "token: the transfer token (32 to 200 characters)")
    return token


def refused(error: TransferError) -> ApiError:
    return ApiError(error.status, error.code, error.message)


async def expect_view(request: web.Request) -> web.Response:
    server_id = server_id_of(request)
    body = await json_body(request)
    token, game, seconds = transfer_token(body), body.get("game"), body.get("valid_seconds")
    if not isinstance(game, str):
        raise ApiError(400, "invalid_request", "game: a game name is required")
    if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 1:
        raise ApiError(400, "invalid_request", "valid_seconds: a number of seconds")
    disk_mb = body.get("disk_mb", DEFAULT_DISK_MB)
    _, least, most = PLAN_BOUNDS["disk_mb"]
    if not isinstance(disk_mb, int) or isinstance(disk_mb, bool) or not least <= disk_mb <= most:
        raise ApiError(400, "invalid_request", f"disk_mb: an integer from {least} to {most}")
    try:
        request.app[NODE].transfers.expect(server_id, token, game, seconds, disk_mb)
    except TransferError as error:
        raise refused(error) from error
    except UnknownGame as error:
        raise ApiError(400, "invalid_request", f"unknown game {error}") from error
    return web.json_response({"expected": True}, status=201)


async def receive_view(request: web.Request) -> web.Response:
    transfers = request.app[NODE].transfers
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    server_id = request.match_info["server_id"]
    try:
        if scheme != "Bearer" or not SERVER_ID.fullmatch(server_id):
            raise TransferError(401, "unauthorized", "a valid transfer token is required")
        incoming = transfers.authorised(server_id, given)
        sha256, length = request.headers.get(ARCHIVE_SHA256_HEADER, ""), request.content_length
        if len(sha256) != 64 or length is None:
            raise TransferError(400, "invalid_request", f"{ARCHIVE_SHA256_HEADER} and a length")
        archived = await transfers.receive(incoming, request.content, length, sha256)
    except TransferError as error:
        raise refused(error) from error
    return web.json_response({"size_bytes": archived.size_bytes, "sha256": archived.sha256})


async def fetch_view(request: web.Request) -> web.Response:
    """An expected server's archive, fetched from the bucket instead of sent by a node."""
    server_id = server_id_of(request)
    body = await json_body(request)
    url, sha256, size = body.get("url"), body.get("sha256"), body.get("size_bytes")
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        raise ApiError(400, "invalid_request", "url: the archive's presigned http(s) URL")
    if not isinstance(sha256, str) or not SHA256.match(sha256):
        raise ApiError(400, "invalid_request", "sha256: the archive's SHA-256 (64 hex digits)")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 < size < 2**63:
        raise ApiError(400, "invalid_request", "size_bytes: the archive's size in bytes")
    expected = Archived(size_bytes=size, sha256=sha256)
    try:
        await request.app[NODE].transfers.fetch(server_id, url, expected)
    except TransferError as error:
        raise refused(error) from error
    return web.json_response({"size_bytes": size, "sha256": sha256})


async def commit_view(request: web.Request) -> web.Response:
    server_id = server_id_of(request)
    node = request.app[NODE]
    try:
        node.transfers.commit(server_id)
    except TransferError as error:
        raise refused(error) from error
    return web.json_response({"committed": True})


async def discard_view(request: web.Request) -> web.Response:
    request.app[NODE].transfers.discard(server_id_of(request))
    return web.json_response({"discarded": True})


async def send_view(request: web.Request) -> web.Response:
    supervisor = known_server(request)
    body = await json_body(request)
    token, target_url, ca_pem = transfer_token(body), body.get("target_url"), body.get("target_ca")
    if not isinstance(target_url, str) or not target_url.startswith("https://"):
        raise ApiError(400, "invalid_request", "target_url: the target agent's https:// URL")
    if not isinstance(ca_pem, str):
        raise ApiError(400, "invalid_request", "target_ca: PEM text, or empty for the system's")
    try:
        sent = await supervisor.send_to(request.app[NODE].transfers, target_url, ca_pem, token)
    except TransferError as error:
        raise refused(error) from error
    except InvalidState as error:
        raise ApiError(409, "invalid_state", str(error)) from error
    return web.json_response({"size_bytes": sent.size_bytes, "sha256": sent.sha256})


async def forget_view(request: web.Request) -> web.Response:
    try:
        request.app[NODE].forget(server_id_of(request))
    except InvalidState as error:
        raise ApiError(409, "invalid_state", str(error)) from error
    return web.json_response({"removed": True})
