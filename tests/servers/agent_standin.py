"""A small stand-in for a node's agent: real HTTPS on loopback with a throw-away trustme CA,
the bearer token checked, every request recorded (and the bodies the agent reads as the
protocol's messages read so: one that is not fails the test), answers scripted per (method,
path).

Only the far side of the network is faked; the control plane's NodeRuntime talks to it as it
would to `gshost-agent` (docs/agent-protocol.md).
"""

from __future__ import annotations

import json
import re
import ssl
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import trustme

from gshost_agent.protocol import (
    JobRequest,
    ProtocolError,
    StartRequest,
    TransferExpected,
    TransferFetch,
    TransferSend,
)

# The bodies the agent reads as the protocol's messages, by the end of their route.
MESSAGES: list[tuple[re.Pattern[str], Callable[[Any], object]]] = [
    (re.compile(r"/v1/servers/[^/]+/(start|restart)"), StartRequest.from_json),
    (re.compile(r"/v1/servers/[^/]+/jobs"), JobRequest.from_json),
    (re.compile(r"/v1/servers/[^/]+/transfer"), TransferSend.from_json),
    (re.compile(r"/v1/transfers/[^/]+"), TransferExpected.from_json),
    (re.compile(r"/v1/transfers/[^/]+/fetch"), TransferFetch.from_json),
]


@dataclass(frozen=True)
class AgentRequest:
    method: str
    path: str  # with the query string
    authorization: str | None
    body: Any


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _serve(self) -> None:
        agent = self.server.agent
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        authorization = self.headers.get("Authorization")
        agent.requests.append(AgentRequest(self.command, self.path, authorization, body))
        agent.check(self.command, self.path.split("?")[0], body)
        if agent.on_request is not None:
            agent.on_request(agent.requests[-1])
        if authorization != f"Bearer {agent.token}":
            status, answer = 401, {"error": {"code": "invalid_token", "message": "No."}}
        else:
            status, answer = agent.answer_for(self.command, self.path.split("?")[0])
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, agent: StandInAgent, context: ssl.SSLContext) -> None:
        self.agent = agent
        super().__init__(("127.0.0.1", 0), _Handler)
        self.socket = context.wrap_socket(self.socket, server_side=True)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A caller that gave up before the answer (its deadline) is no error of the agent's."""
        if not isinstance(sys.exc_info()[1], ConnectionError | ssl.SSLError):
            super().handle_error(request, client_address)


class StandInAgent:
    def __init__(self) -> None:
        self.ca = trustme.CA()
        self.token = ""
        self.requests: list[AgentRequest] = []
        self.malformed: list[str] = []  # bodies that were no protocol message
        self.answers: dict[tuple[str, str], tuple[int, Any]] = {}
        # Called with each request before it is answered, in the agent's thread.
        self.on_request: Callable[[AgentRequest], None] | None = None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("127.0.0.1").configure_cert(context)
        self._server = _Server(self, context)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    @property
    def ca_pem(self) -> str:
        return self.ca.cert_pem.bytes().decode()

    def check(self, method: str, path: str, body: Any) -> None:
        """A POST's body is read as the agent reads it: one that is not is kept."""
        if method != "POST":
            return
        for route, message in MESSAGES:
            if route.fullmatch(path):
                try:
                    message(body)
                except ProtocolError as error:
                    self.malformed.append(f"{path}: {error.field}: {error}")

    def answer(self, method: str, path: str, status: int, body: Any) -> None:
        self.answers[(method, path)] = (status, body)

    def answer_for(self, method: str, path: str) -> tuple[int, Any]:
        if method == "PUT":  # settings: written as given
            return self.answers.get((method, path), (200, self.requests[-1].body or {}))
        default = (202, {"state": "ok"}) if method == "POST" else (404, {"error": {}})
        return self.answers.get((method, path), default)

    def calls(self, method: str | None = None) -> list[AgentRequest]:
        return [r for r in self.requests if method is None or r.method == method]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def stand_in_agent() -> Iterator[StandInAgent]:
    agent = StandInAgent()
    agent.start()
    try:
        yield agent
    finally:
        agent.stop()
    assert agent.malformed == []  # everything the control plane sent was a protocol message
