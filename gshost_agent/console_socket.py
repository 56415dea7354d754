"""The live console: `GET /api/v1/servers/{id}/console`, a websocket a browser (or any client
holding a console token) opens straight to the node (docs/console.md).

Outside the node token's middleware: the socket authenticates with a console token, a JWT
(EdDSA) the control plane signed for this node and this server, checked against the public
keys the control plane sends in every heartbeat's answer (`ConsoleAccess`). Frames are JSON
text `{"event", "args"}`.

One `ServerConsole` per server with sockets open reads the server's lines and state from its
supervisor (as they arrive, on the event loop) and hands each line, encoded once, to every
socket's own bounded queue; each socket has its own writer task, so a slow reader only fills
its own queue, and past `SLOW_READER_BYTES` waiting it is closed (4408). Withdrawals of
access (`Node.withdrawals`) close the sockets they cover (4403).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import socket as sockets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import jwt
from aiohttp import web

from gshost_agent.protocol import HeartbeatAnswer, ServerState, subject_parts
from gshost_agent.withdrawals import Withdrawal, Withdrawals

if TYPE_CHECKING:
    from gshost_agent.supervisor import Supervisor

logger = logging.getLogger("gshost_agent.console_socket")

AUTH_SECONDS = 5.0
FRAME_LIMIT = 4096  # bytes of a client frame; past it the socket is closed with 1009
SOCKETS_PER_SERVER = 30
BACKLOG_LINES = 150
STATS_SECONDS = 2.0
EXPIRING_SECONDS = 60.0
SLOW_READER_BYTES = 1 << 20
SEND_BUFFER_BYTES = 64 * 1024  # the kernel's share of what waits for a slow reader
CLOSE_SECONDS = 2.0
ALGORITHM = "EdDSA"
REQUIRED_CLAIMS = ["aud", "sub", "server", "scopes", "jti", "iat", "exp"]
CONSOLE_WRITE = "console:write"

# Close codes (docs/console.md).
AUTH_FAILED = 4401
ACCESS_WITHDRAWN = 4403
SLOW_READER = 4408
TOO_MANY_SOCKETS = 4429

# Per socket: (frames, seconds) of each kind; past it a frame is dropped and `throttled` sent.
LIMITS = {"send command": (10, 1.0), "auth": (2, 5.0), "other": (4, 1.0)}


class TokenRefused(Exception):
    """A console token this node does not take; the text is the reason told to the client."""


@dataclass(frozen=True)
class Grant:
    """What a verified console token allows."""

    token: str
    server_id: str
    key_id: str | None
    person_id: str | None
    scopes: frozenset[str]
    issued_at: float
    expires_at: float
    key_expires_at: float | None  # the key's own expiry: the socket ends with 4403 then

    def covered_by(self, withdrawal: Withdrawal) -> bool:
        return withdrawal.covers(
            server_id=self.server_id, key_id=self.key_id, person_id=self.person_id
        )


def _public_key(jwk: dict[str, Any]) -> Any:
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519" or not isinstance(jwk.get("x"), str):
        raise ValueError("an Ed25519 JWK")
    base64.urlsafe_b64decode(jwk["x"] + "==")  # a readable key, or ValueError here
    return jwt.PyJWK(jwk, algorithm=ALGORITHM).key


class ConsoleAccess:
    """What the control plane said in its last heartbeat answer: this node's name (the tokens'
    audience), the public keys that sign console tokens (by kid) and the panel's origins."""

    def __init__(self, withdrawals: Withdrawals) -> None:
        self.withdrawals = withdrawals
        self.node_name: str | None = None
        self.keys: dict[str, Any] = {}
        self.origins: frozenset[str] = frozenset()

    def update(self, answer: HeartbeatAnswer) -> None:
        """Take the heartbeat's answer; a key that is not one is left out, and an answer
        without `console` leaves the keys and origins as they were."""
        if answer.node:
            self.node_name = answer.node
        console = answer.console
        if console is None:
            return
        keys = {}
        for jwk in console.keys:
            try:
                keys[str(jwk["kid"])] = _public_key(jwk)
            except (KeyError, TypeError, ValueError, jwt.PyJWTError):
                logger.warning("a console signing key that is not one was ignored")
        if keys:
            self.keys = keys
        self.origins = frozenset(origin.lower().rstrip("/") for origin in console.origins)

    def origin_allowed(self, origin: str | None) -> bool:
        return origin is None or origin.lower().rstrip("/") in self.origins

    def verify(self, token: str, server_id: str) -> Grant:
        if self.node_name is None or not self.keys:
            raise TokenRefused("the node has no console keys yet")
        try:
            kid = jwt.get_unverified_header(token).get("kid")
            key = self.keys.get(kid) if isinstance(kid, str) else None
            if key is None:
                raise TokenRefused("unknown signing key")
            claims = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                audience=self.node_name,
                options={"require": REQUIRED_CLAIMS, "verify_iat": False},
            )
        except jwt.ExpiredSignatureError:
            raise TokenRefused("token expired") from None
        except jwt.InvalidAudienceError:
            raise TokenRefused("token for another node") from None
        except jwt.PyJWTError:
            raise TokenRefused("invalid token") from None
        if claims.get("server") != server_id:
            raise TokenRefused("token for another server")
        key_id, person_id = subject_parts(str(claims["sub"]))
        scopes, issued_at = claims["scopes"], claims["iat"]
        key_exp = claims.get("key_exp")
        if (
            (key_id is None and person_id is None)
            or not isinstance(scopes, list)
            or not isinstance(issued_at, int | float)
            or not (key_exp is None or isinstance(key_exp, int | float))
        ):
            raise TokenRefused("invalid token")
        grant = Grant(
            token=token,
            server_id=server_id,
            key_id=key_id,
            person_id=person_id,
            scopes=frozenset(str(scope) for scope in scopes),
            issued_at=float(issued_at),
            expires_at=float(claims["exp"]),
            key_expires_at=float(key_exp) if key_exp is not None else None,
        )
        refused = self.withdrawals.refuses(
            server_id=server_id, issued_at=grant.issued_at, key_id=key_id, person_id=person_id
        )
        if refused or (grant.key_expires_at is not None and grant.key_expires_at <= time.time()):
            raise TokenRefused("access withdrawn")
        return grant


def frame(event: str, *args: Any) -> str:
    return json.dumps({"event": event, "args": list(args)}, ensure_ascii=False)


def utf8_size(text: str) -> int:
    """The bytes a text frame takes on the wire (an ASCII text's length costs nothing)."""
    return len(text) if text.isascii() else len(text.encode())


class Bucket:
    """At most `count` frames in any `seconds`: a sliding window."""

    def __init__(self, count: int, seconds: float) -> None:
        self.count, self.seconds = count, seconds
        self._times: deque[float] = deque()

    def take(self, now: float) -> bool:
        while self._times and now - self._times[0] >= self.seconds:
            self._times.popleft()
        if len(self._times) >= self.count:
            return False
        self._times.append(now)
        return True


class ConsoleSocket:
    """One client's socket, from its first frame to its close."""

    def __init__(
        self, ws: web.WebSocketResponse, request: web.Request, consoles: Consoles, server_id: str
    ) -> None:
        self.ws, self.request, self.consoles, self.server_id = ws, request, consoles, server_id
        self.grant: Grant | None = None
        self.console: ServerConsole | None = None
        self._queue: deque[str] = deque()
        self._waiting_bytes = 0
        self._ready = asyncio.Event()
        self._closing = False
        self._tasks: list[asyncio.Task[None]] = []
        self._timers: list[asyncio.TimerHandle] = []
        self._commands: asyncio.Queue[str] = asyncio.Queue(maxsize=LIMITS["send command"][0])
        self._buckets = {kind: Bucket(*limit) for kind, limit in LIMITS.items()}

    # Sending ----------------------------------------------------------------------------------

    def offer(self, text: str) -> None:
        """Queue a frame; a reader with more than SLOW_READER_BYTES waiting is closed."""
        if self._closing:
            return
        self._queue.append(text)
        self._waiting_bytes += utf8_size(text)
        self._ready.set()
        transport = self.request.transport
        buffered = transport.get_write_buffer_size() if transport is not None else 0
        if self._waiting_bytes + buffered > SLOW_READER_BYTES:
            self.close_soon(SLOW_READER, "slow reader")

    async def _write_forever(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._queue:
                text = self._queue.popleft()
                self._waiting_bytes -= utf8_size(text)
                await self.ws.send_str(text)

    def close_soon(self, code: int, reason: str) -> None:
        if not self._closing:
            self._closing = True
            asyncio.get_running_loop().create_task(self._close(code, reason))

    async def _close(self, code: int, reason: str) -> None:
        self._closing = True
        self._stop_tasks()
        if self.console is not None:
            self.console.leave(self)
        try:
            await asyncio.wait_for(self._last_frames(code, reason), CLOSE_SECONDS)
        except Exception as error:
            logger.info(
                "%s: a socket closed (%s) without its close frame: %r", self.server_id, code, error
            )
        if not self.ws.closed and self.request.transport is not None:
            self.request.transport.close()

    async def _last_frames(self, code: int, reason: str) -> None:
        """What is queued (the `token expired` or `jwt error` that says why), then the close
        frame; a slow reader's queue is dropped: its close frame goes after what the kernel
        holds."""
        if code == SLOW_READER:
            self._queue.clear()
        while self._queue:
            await self.ws.send_str(self._queue.popleft())
        await self.ws.close(code=code, message=reason.encode()[:120], drain=False)

    def _stop_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        for timer in self._timers:
            timer.cancel()
        self._timers = []

    # The conversation -------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._authenticate()
            while not self._closing:
                message = await self.ws.receive()
                if message.type == aiohttp.WSMsgType.TEXT:
                    self._on_frame(message.data)
                elif message.type == aiohttp.WSMsgType.BINARY:
                    self.offer(frame("error", "text frames only"))
                else:
                    break  # closed, or a frame over FRAME_LIMIT (aiohttp closed it with 1009)
        finally:
            self._closing = True
            self._stop_tasks()
            if self.console is not None:
                self.console.leave(self)

    async def _authenticate(self) -> None:
        # One deadline for the whole wait: `receive(timeout=…)` starts its timeout again after
        # each ping it answers, so a client that only pings would never be refused.
        try:
            async with asyncio.timeout(AUTH_SECONDS):
                message = await self.ws.receive()
        except TimeoutError:
            await self._refuse("authentication timed out")
            return
        if message.type != aiohttp.WSMsgType.TEXT:
            self._closing = True
            if message.type in (aiohttp.WSMsgType.BINARY,):
                await self._refuse("the first frame must be auth")
            return
        event, args = _parsed(message.data)
        if event != "auth" or len(args) != 1 or not isinstance(args[0], str):
            await self._refuse("the first frame must be auth")
            return
        try:
            self.grant = self.consoles.access.verify(args[0], self.server_id)
        except TokenRefused as refused:
            await self._refuse(str(refused))
            return
        self._buckets["auth"].take(time.monotonic())
        console = self.consoles.console(self.server_id)
        if not console.join(self):
            self._closing = True
            await self._close(TOO_MANY_SOCKETS, "too many sockets on this server")
            return
        self.console = console
        self._tasks = [
            asyncio.get_running_loop().create_task(self._write_forever()),
            asyncio.get_running_loop().create_task(self._send_commands()),
        ]
        self._arm_expiry()

    async def _refuse(self, reason: str) -> None:
        self._closing = True
        with contextlib.suppress(Exception):
            await self.ws.send_str(frame("jwt error", reason))
            await asyncio.wait_for(
                self.ws.close(code=AUTH_FAILED, message=reason.encode()[:120]), CLOSE_SECONDS
            )

    def _arm_expiry(self) -> None:
        for timer in self._timers:
            timer.cancel()
        assert self.grant is not None
        loop, now = asyncio.get_running_loop(), time.time()
        expiring = self.grant.expires_at - EXPIRING_SECONDS - now
        self._timers = [
            loop.call_later(max(expiring, 0), self.offer, frame("token expiring")),
            loop.call_later(max(self.grant.expires_at - now, 0), self._expired),
        ]
        if self.grant.key_expires_at is not None:
            left = max(self.grant.key_expires_at - now, 0)
            self._timers.append(
                loop.call_later(left, self.close_soon, ACCESS_WITHDRAWN, "key expired")
            )

    def _expired(self) -> None:
        self.offer(frame("token expired"))
        self.close_soon(AUTH_FAILED, "token expired")

    def _on_frame(self, data: str) -> None:
        event, args = _parsed(data)
        kind = event if event in LIMITS else "other"
        if not self._buckets[kind].take(time.monotonic()):
            self.offer(frame("throttled", event if isinstance(event, str) else ""))
            return
        if event == "auth":
            self._reauthenticate(args)
        elif event == "send command":
            self._command(args)
        elif event == "send stats":
            assert self.console is not None
            self.offer(self.console.stats_frame())
        else:
            self.offer(frame("error", "unknown event"))

    def _reauthenticate(self, args: list[Any]) -> None:
        token = args[0] if len(args) == 1 and isinstance(args[0], str) else ""
        try:
            self.grant = self.consoles.access.verify(token, self.server_id)
        except TokenRefused as refused:
            self.offer(frame("jwt error", str(refused)))
            self.close_soon(AUTH_FAILED, str(refused))
            return
        self._arm_expiry()
        self.offer(frame("auth success"))

    def _command(self, args: list[Any]) -> None:
        assert self.grant is not None
        if CONSOLE_WRITE not in self.grant.scopes:
            self.offer(frame("error", "insufficient_scope"))
            return
        if len(args) != 1 or not isinstance(args[0], str):
            self.offer(frame("error", "invalid_request"))
            return
        try:
            self._commands.put_nowait(args[0])
        except asyncio.QueueFull:  # the bucket lets no more through than the queue holds
            self.offer(frame("throttled", "send command"))

    async def _send_commands(self) -> None:
        """One at a time, in the order typed: each through the control plane (docs/console.md)."""
        while True:
            command = await self._commands.get()
            assert self.grant is not None
            refused = await self.consoles.send_command(self.grant, command, self.request)
            if refused == "token_refused":
                self.close_soon(ACCESS_WITHDRAWN, "access withdrawn")
            elif refused is not None:
                self.offer(frame("error", refused))

    # Told by the server's console -------------------------------------------------------------

    def welcome(self, status: str, lines: list[str]) -> None:
        self.offer(frame("auth success"))
        self.offer(frame("status", status))
        for text in lines:
            self.offer(text)


def _parsed(data: str) -> tuple[Any, list[Any]]:
    try:
        body = json.loads(data)
    except ValueError:
        return None, []
    if not isinstance(body, dict):
        return None, []
    args = body.get("args", [])
    return body.get("event"), args if isinstance(args, list) else []


def line_frame(text: str, daemon: bool) -> str:
    return frame("daemon message", text) if daemon else frame("console output", text)


class ServerConsole:
    """The sockets of one server, fed from its supervisor: one reader for them all."""

    def __init__(self, supervisor: Supervisor, on_empty: Callable[[str], None]) -> None:
        self.supervisor = supervisor
        self.sockets: set[ConsoleSocket] = set()
        self._on_empty = on_empty
        self._stats: asyncio.Task[None] | None = None
        supervisor.console_listeners.append(self._on_line)
        supervisor.state_listeners.append(self._on_state)

    def join(self, socket: ConsoleSocket) -> bool:
        if len(self.sockets) >= SOCKETS_PER_SERVER:
            return False
        held = list(self.supervisor.lines)[-BACKLOG_LINES:]
        self.sockets.add(socket)
        socket.welcome(str(self.supervisor.state), [line_frame(t, d) for _, t, d in held])
        if self._stats is None:
            self._stats = asyncio.get_running_loop().create_task(self._stats_forever())
        return True

    def leave(self, member: ConsoleSocket) -> None:
        if member not in self.sockets:
            return
        self.sockets.discard(member)
        if not self.sockets:
            self.close()

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.supervisor.console_listeners.remove(self._on_line)
        with contextlib.suppress(ValueError):
            self.supervisor.state_listeners.remove(self._on_state)
        if self._stats is not None:
            self._stats.cancel()
            self._stats = None
        self._on_empty(self.supervisor.server_id)

    def _broadcast(self, text: str) -> None:
        for socket in list(self.sockets):
            socket.offer(text)

    def _on_line(self, n: int, text: str, daemon: bool) -> None:
        self._broadcast(line_frame(text, daemon))

    def _on_state(self, state: ServerState) -> None:
        self._broadcast(frame("status", str(state)))

    def stats_frame(self) -> str:
        readings, running = self.supervisor.readings, self.supervisor.running
        cpu, memory = readings.usage(running)
        stats = {
            "memory_mb": memory,
            "cpu_percent": cpu,
            "players": len(readings.roster.players),
            "uptime_seconds": readings.uptime(running),
        }
        return frame("stats", stats)

    async def _stats_forever(self) -> None:
        while True:
            await asyncio.sleep(STATS_SECONDS)
            if self.supervisor.state == ServerState.RUNNING:
                self._broadcast(self.stats_frame())


@dataclass
class Consoles:
    """Every server console with sockets open on this node."""

    access: ConsoleAccess
    supervisor_of: Callable[[str], Supervisor]
    post_command: Callable[[dict[str, Any]], Any]  # -> awaitable (status, JSON answer)
    consoles: dict[str, ServerConsole] = field(default_factory=dict)
    _loop: asyncio.AbstractEventLoop | None = None

    def __post_init__(self) -> None:
        self.access.withdrawals.subscribe(self._on_withdrawal)

    def console(self, server_id: str) -> ServerConsole:
        self._loop = asyncio.get_running_loop()
        if server_id not in self.consoles:
            supervisor = self.supervisor_of(server_id)
            self.consoles[server_id] = ServerConsole(supervisor, self._forget)
        return self.consoles[server_id]

    def _forget(self, server_id: str) -> None:
        self.consoles.pop(server_id, None)

    def _on_withdrawal(self, withdrawal: Withdrawal) -> None:
        """Told on whichever thread added it (an SFTP helper's may differ): on the loop."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._close_covered, withdrawal)

    def _close_covered(self, withdrawal: Withdrawal) -> None:
        for console in list(self.consoles.values()):
            for socket in list(console.sockets):
                if socket.grant is not None and socket.grant.covered_by(withdrawal):
                    socket.close_soon(ACCESS_WITHDRAWN, "access withdrawn")

    async def send_command(self, grant: Grant, command: str, request: web.Request) -> str | None:
        """None once the control plane had the game take it, else the error code to tell."""
        body = {
            "token": grant.token,
            "command": command,
            "ip": request.remote,
            "user_agent": request.headers.get("User-Agent", "")[:500],
        }
        try:
            status, answer = await self.post_command(body)
        except Exception as error:
            logger.warning("%s: a socket's command not sent (%s)", grant.server_id, error)
            return "node_unavailable"
        if status < 300:
            return None
        found = answer.get("error") if isinstance(answer, dict) else None
        code = found.get("code") if isinstance(found, dict) else None
        return str(code) if code else f"error_{status}"


async def console_socket_view(request: web.Request, consoles: Consoles, server_id: str) -> Any:
    # aiohttp refuses a frame of max_msg_size bytes itself: FRAME_LIMIT bytes must still pass.
    ws = web.WebSocketResponse(max_msg_size=FRAME_LIMIT + 1, timeout=CLOSE_SECONDS, heartbeat=30.0)
    await ws.prepare(request)
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(sockets.SOL_SOCKET, sockets.SO_SNDBUF, SEND_BUFFER_BYTES)
    await ConsoleSocket(ws, request, consoles, server_id).run()
    return ws
