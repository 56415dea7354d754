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
from gshost_agent.console_socket import console_socket_view
from gshost_agent.files import routes as file_routes
from gshost_agent.keepers import KeeperGone
from gshost_agent.netns import NetworkError, PortTaken
from gshost_agent.node import Node
from gshost_agent.protocol import (
    BACKUP_ID,
    CONSOLE_SOCKET_PATH,
    NODE_ROUTE,
    SERVER_ID,
    SERVER_ROUTE,
    TRANSFER_ROUTE,
    ArchiveReceipt,
    JobRequest,
    ProtocolError,
    StartRequest,
    TransferExpected,
    TransferFetch,
    TransferSend,
    format_time,
)
from gshost_agent.sandbox import SandboxUnavailable
from gshost_agent.server_state import DiskLimitExceeded, InvalidCommand, InvalidState
from gshost_agent.settings_files import InvalidSettings
from gshost_agent.supervisor import Supervisor
from gshost_agent.templates import UnknownGame
from gshost_agent.transfers import ARCHIVE_SHA256_HEADER, TransferError
from gshost_agent.withdrawals import WithdrawalInvalid

logger = logging.getLogger("gshost_agent.api")

BODY_LIMIT = 64 * 1024
TRANSFER_UPLOAD = "transfer-upload"
CONSOLE_SOCKET = "console-socket"
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
    except ProtocolError as error:  # a body that is not the message the route takes
        return error_answer(400, "invalid_request", error.message)
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
    name = request.match_info.route.name
    if name in (TRANSFER_UPLOAD, CONSOLE_SOCKET) or name in file_routes.LINK_ROUTES:
        # Another node's upload, with a transfer token of its own; a console websocket, with a
        # console token in its first frame (console_socket.py); a customer's single-use file link.
        return await handler(request)
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    expected = request.app[TOKEN]
    # surrogateescape: a header of undecodable bytes is a wrong token, not an error.
    given_bytes = given.encode("utf-8", "surrogateescape")
    if scheme != "Bearer" or not hmac.compare_digest(given_bytes, expected.encode()):
        raise ApiError(401, "unauthorized", "a valid node token is required")
    length, limit = request.content_length, file_routes.body_limit(name, BODY_LIMIT)
    if length is not None and limit is not None and length > limit:
        raise ApiError(413, "payload_too_large", f"bodies are limited to {limit} bytes")
    return await handler(request)


def make_app(node: Node, token: str) -> web.Application:
    app = web.Application(middlewares=[errors, authentication], client_max_size=BODY_LIMIT)
    app[NODE] = node
    app[TOKEN] = token
    app[file_routes.SPACES] = node.files
    app.on_response_prepare.append(file_routes.links_open_to_any_page)
    server, transfer = SERVER_ROUTE, TRANSFER_ROUTE
    app.add_routes(
        [
            web.get(NODE_ROUTE, node_view),
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
            web.delete(f"{server}/backups/{{backup_id}}", backup_remove_view),
            web.post(transfer, expect_view),
            web.put(f"{transfer}/archive", receive_view, name=TRANSFER_UPLOAD),
            web.post(f"{transfer}/fetch", fetch_view),
            web.post("/v1/withdrawals", withdrawals_view),
            web.get(CONSOLE_SOCKET_PATH, console_view, name=CONSOLE_SOCKET),
            web.post(f"{transfer}/commit", commit_view),
            web.delete(transfer, discard_view),
            *file_routes.routes(server),
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
    start = StartRequest.from_json(await json_body(request))
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


async def console_view(request: web.Request) -> web.StreamResponse:
    """The console websocket: the Origin is checked before the upgrade (403)."""
    server_id = server_id_of(request)
    node = request.app[NODE]
    if not node.console_access.origin_allowed(request.headers.get("Origin")):
        raise ApiError(403, "origin_not_allowed", "this origin may not open the console")
    if not web.WebSocketResponse().can_prepare(request).ok:
        raise ApiError(400, "invalid_request", "a websocket upgrade is required")
    return await console_socket_view(request, node.consoles, server_id)


async def withdrawals_view(request: web.Request) -> web.Response:
    """Access withdrawn by the control plane: covered sockets close, their tokens are refused."""
    try:
        request.app[NODE].withdraw(await json_body(request))
    except WithdrawalInvalid as error:
        raise ApiError(400, "invalid_request", str(error)) from error
    return web.json_response({"taken": True})


async def console_read_view(request: web.Request) -> web.Response:
    supervisor = known_server(request)
    after = query_number(request, "after", "0", 0, 1 << 62)
    return web.json_response(supervisor.console_after(after).to_json())


async def players_view(request: web.Request) -> web.Response:
    return web.json_response(await known_server(request).players())


async def stats_view(request: web.Request) -> web.Response:
    return web.json_response(known_server(request).stats().to_json())


async def metrics_view(request: web.Request) -> web.Response:
    supervisor = known_server(request)
    now = datetime.now(UTC).timestamp()
    start = iso_time(request.query.get("start"), "start", now - 3600)
    end = iso_time(request.query.get("end"), "end", now)
    step = query_number(request, "step", "60", 1, 86400)
    if end < start:
        raise ApiError(400, "invalid_request", "start must not be after end")
    samples = supervisor.readings.samples.between(start, end, step)
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
    job = JobRequest.from_json(await json_body(request))
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


def refused(error: TransferError) -> ApiError:
    return ApiError(error.status, error.code, error.message)


async def expect_view(request: web.Request) -> web.Response:
    server_id = server_id_of(request)
    expected = TransferExpected.from_json(await json_body(request))
    try:
        request.app[NODE].transfers.expect(
            server_id, expected.token, expected.game, expected.valid_seconds, expected.disk_mb
        )
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
    return web.json_response(ArchiveReceipt(archived.size_bytes, archived.sha256).to_json())


async def fetch_view(request: web.Request) -> web.Response:
    """An expected server's archive, fetched from the bucket instead of sent by a node."""
    server_id = server_id_of(request)
    fetch = TransferFetch.from_json(await json_body(request))
    expected = Archived(size_bytes=fetch.size_bytes, sha256=fetch.sha256)
    try:
        await request.app[NODE].transfers.fetch(server_id, fetch.url, expected)
    except TransferError as error:
        raise refused(error) from error
    return web.json_response(ArchiveReceipt(fetch.size_bytes, fetch.sha256).to_json())


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
    send = TransferSend.from_json(await json_body(request))
    transfers = request.app[NODE].transfers
    try:
        sent = await supervisor.send_to(transfers, send.target_url, send.target_ca, send.token)
    except TransferError as error:
        raise refused(error) from error
    except InvalidState as error:
        raise ApiError(409, "invalid_state", str(error)) from error
    return web.json_response(ArchiveReceipt(sent.size_bytes, sent.sha256).to_json())


async def backup_remove_view(request: web.Request) -> web.Response:
    server_id = server_id_of(request)
    backup_id = request.match_info["backup_id"]
    if not BACKUP_ID.fullmatch(backup_id):
        raise ApiError(404, "not_found", "no such backup")
    try:
        removed = request.app[NODE].remove_backup(server_id, backup_id)
    except InvalidState as error:
        raise ApiError(409, "invalid_state", str(error)) from error
    return web.json_response({"removed": removed})


async def forget_view(request: web.Request) -> web.Response:
    server_id = server_id_of(request)
    backups = request.query.get("backups", "keep")
    if backups not in ("keep", "remove"):
        raise ApiError(400, "invalid_request", "backups: keep (the default) or remove")
    try:
        request.app[NODE].forget(server_id, backups=backups == "remove")
    except InvalidState as error:
        raise ApiError(409, "invalid_state", str(error)) from error
    return web.json_response({"removed": True})
