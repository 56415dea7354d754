"""A real HTTPS webhook receiver on loopback (127.0.0.1 unless told) for sender tests.

Certificates come from a throw-away ``trustme`` CA whose certificate is written to
``ca_pem_path``. Every request is recorded; responses are scripted per path or globally.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
import socket
import socketserver
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import trustme

LOOPBACK = ipaddress.IPv4Address("127.0.0.1")
LOOPBACK_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"),)
_HANDLER_IDLE_TIMEOUT = 5.0


def loopback_resolver(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Resolves every name to 127.0.0.1, like a DNS answer pointing at the receiver."""
    return [LOOPBACK]


@dataclass(frozen=True)
class ReceivedRequest:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes
    received_at: float  # time.monotonic()
    client_port: int
    server_name: str | None  # SNI sent by the client

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


@dataclass(frozen=True)
class Behaviour:
    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering
    hang: bool = False  # never answer (released on stop)
    trickle_interval: float | None = None  # seconds between single body bytes
    trickle_head: bool = False  # also trickle the status line and headers
    stream_forever: bool = False  # close-delimited body that never ends
    redirect_to: str | None = None  # 302 with this Location


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # trickled bytes must leave one by one
    server: _Server
    server_name: str | None = None

    def setup(self) -> None:
        receiver = self.server.receiver
        raw: socket.socket = self.request
        raw.settimeout(_HANDLER_IDLE_TIMEOUT)
        receiver._track(raw)
        try:
            self.request, self.server_name = receiver._tls_accept(raw)
        finally:
            receiver._untrack(raw)
        receiver._track(self.request)
        super().setup()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.receiver._untrack(self.request)
            # socketserver only closes the raw socket, which the TLS wrapper has detached.
            self.request.close()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_POST(self) -> None:
        self._serve()

    do_GET = do_PUT = do_POST

    def _serve(self) -> None:
        receiver = self.server.receiver
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0]
        receiver._record(
            ReceivedRequest(
                method=self.command,
                path=self.path,
                headers=list(self.headers.items()),
                body=body,
                received_at=time.monotonic(),
                client_port=self.client_address[1],
                server_name=self.server_name,
            )
        )
        try:
            receiver._respond(self, receiver.behaviour_for(path))
        except OSError:
            self.close_connection = True  # the client went away


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    # The default backlog of 5 (and even 64) drops SYNs when a few hundred sender threads open
    # connections at once; each dropped SYN costs the sender a 1 s+ retransmission.
    request_queue_size = 1024
    block_on_close = True  # server_close() joins every handler thread

    def __init__(self, receiver: HttpsReceiver, bind: str) -> None:
        self.receiver = receiver
        self.address_family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        super().__init__((bind, 0), _Handler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # skips HTTPServer's reverse DNS lookup
        self.server_name = "localhost"
        self.server_port = int(self.server_address[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.receiver._record_error()


class HttpsReceiver:
    def __init__(
        self, names: tuple[str, ...] = ("localhost", "127.0.0.1"), *, bind: str = "127.0.0.1"
    ) -> None:
        self._bind = bind
        self._ca = trustme.CA()
        self._tmpdir = Path(tempfile.mkdtemp(prefix="webhook-receiver-"))
        self.ca_pem_path = str(self._tmpdir / "ca.pem")
        self._ca.cert_pem.write_to_path(self.ca_pem_path)
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ca.issue_cert(*names).configure_cert(self._context)
        self._context.sni_callback = self._remember_sni
        self._sni = threading.local()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._default = Behaviour()
        self._by_path: dict[str, Behaviour] = {}
        self.requests: list[ReceivedRequest] = []
        self.errors: list[BaseException] = []
        self.connections_accepted = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "receiver not started"
        return int(self._server.server_address[1])

    def url(self, path: str = "/hook", host: str = "localhost") -> str:
        return f"https://{host}:{self.port}{path}"

    def set_behaviour(self, *, path: str | None = None, **fields: Any) -> None:
        """Script the answer for ``path`` (without query) or, without a path, for all paths."""
        behaviour = Behaviour(**fields)
        with self._lock:
            if path is None:
                self._default = behaviour
            else:
                self._by_path[path] = behaviour

    def behaviour_for(self, path: str) -> Behaviour:
        with self._lock:
            return self._by_path.get(path, self._default)

    def start(self) -> None:
        self._server = _Server(self, self._bind)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._wake_handlers()
            self._server.server_close()
        shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> HttpsReceiver:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- used by the handler threads ---------------------------------------------------------

    def _remember_sni(self, sock: Any, server_name: str | None, context: Any) -> None:
        self._sni.name = server_name  # runs on the handler thread during its handshake

    def _tls_accept(self, raw: socket.socket) -> tuple[ssl.SSLSocket, str | None]:
        with self._lock:
            self.connections_accepted += 1
        self._sni.name = None
        tls = self._context.wrap_socket(raw, server_side=True)
        return tls, self._sni.name

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._connections.add(sock)
            stopping = self._stopping.is_set()
        if stopping:
            _shutdown(sock)

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._connections.discard(sock)

    def _wake_handlers(self) -> None:
        with self._lock:
            connections = list(self._connections)
        for sock in connections:
            _shutdown(sock)

    def _record(self, request: ReceivedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _record_error(self) -> None:
        error = sys.exc_info()[1]
        if error is not None:
            with self._lock:
                self.errors.append(error)

    def _respond(self, handler: _Handler, behaviour: Behaviour) -> None:
        if behaviour.hang or (behaviour.delay and self._stopping.wait(behaviour.delay)):
            self._stopping.wait()
            handler.close_connection = True
            return
        head = _response_head(behaviour)
        if behaviour.stream_forever:
            handler.close_connection = True
            handler.wfile.write(head)
            self._stream_forever(handler)
        elif behaviour.trickle_interval is not None:
            to_trickle = head + behaviour.body if behaviour.trickle_head else behaviour.body
            if not behaviour.trickle_head:
                handler.wfile.write(head)
            self._trickle(handler, to_trickle, behaviour.trickle_interval)
        else:
            handler.wfile.write(head + behaviour.body)

    def _trickle(self, handler: _Handler, data: bytes, interval: float) -> None:
        for index in range(len(data)):
            handler.wfile.write(data[index : index + 1])
            if self._stopping.wait(interval):
                handler.close_connection = True
                return

    def _stream_forever(self, handler: _Handler) -> None:
        chunk = b"x" * 16384
        while not self._stopping.is_set():
            handler.wfile.write(chunk)


def _response_head(behaviour: Behaviour) -> bytes:
    status = 302 if behaviour.redirect_to and behaviour.status == 200 else behaviour.status
    headers = dict(behaviour.headers)
    if behaviour.redirect_to:
        headers.setdefault("Location", behaviour.redirect_to)
    if behaviour.stream_forever:
        headers.setdefault("Connection", "close")
    else:
        headers.setdefault("Content-Length", str(len(behaviour.body)))
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _shutdown(sock: socket.socket) -> None:
    # socket.socket.shutdown, not SSLSocket.shutdown: only wake blocked reads, leave TLS state.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


@pytest.fixture(name="https_receiver")
def https_receiver_fixture() -> Iterator[HttpsReceiver]:
    """A started receiver for localhost and 127.0.0.1, stopped after the test (registered
    for tests/webhooks/ by its conftest.py)."""
    with HttpsReceiver() as receiver:
        yield receiver
