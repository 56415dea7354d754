"""A stand-in control plane for a real `gshost-agent`: it checks the node token, reads every
body as the protocol's message (one that is not is answered 400 and kept in `malformed`),
applies each report once per (outbox_id, seq) as the real one does, and keeps reports and
heartbeats for the caller to read. The agent tests (tests/agent/conftest.py) and the agent
benchmarks (bench/agent_*.py) both use it; it needs nothing beyond the standard library and
the agent's protocol.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gshost_agent.protocol import (
    BACKUP_PARTS_ROUTE,
    CONSOLE_COMMAND_ROUTE,
    HEARTBEAT_ROUTE,
    REPORTS_ROUTE,
    Heartbeat,
    HeartbeatAnswer,
    PartUrlsRequest,
    ProtocolError,
    Report,
)
from tests.agent.lines import wait_until

MESSAGES: dict[str, Callable[[Any], object]] = {
    HEARTBEAT_ROUTE: Heartbeat.from_json,
    REPORTS_ROUTE: Report.from_json,
    BACKUP_PARTS_ROUTE: PartUrlsRequest.from_json,
}

TOKEN = "gsn_" + "t" * 43


@dataclass
class ControlPlane:
    """Applies each report once per (outbox_id, seq), as the real one does, and keeps them."""

    port: int
    token: str = TOKEN
    address: str = "127.0.0.1"  # where it listens
    tls: tuple[str, str] | None = None  # a certificate and its key: HTTPS
    reports: list[dict[str, Any]] = field(default_factory=list)
    repeats: int = 0
    heartbeats: list[dict[str, Any]] = field(default_factory=list)
    applied: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None
    refused: set[str] = field(default_factory=set)  # servers "of another node": 403
    # Answers the agent's asks for part URLs of a backup to object storage (the body asked).
    part_urls: Callable[[dict[str, Any]], list[str]] | None = None
    # What each heartbeat is answered (the console's keys and origins, withdrawals).
    heartbeat_answer: dict[str, Any] = field(default_factory=lambda: {"node": "test"})
    # Answers a command typed into a console socket: (status, body) for the body sent.
    console_commands: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]] | None = None
    # Answers the agent's asks about SFTP logins (the body asked): a status and a body.
    sftp_auth: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]] | None = None
    malformed: list[str] = field(default_factory=list)  # bodies that were no protocol message

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.address}:{self.port}"

    def up(self) -> None:
        self.server = ThreadingHTTPServer((self.address, self.port), _handler_for(self))
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def apply(self, body: dict[str, Any]) -> int:
        with self.lock:
            if body["seq"] <= self.applied.get(body["outbox_id"], 0):
                self.repeats += 1
            else:
                self.applied[body["outbox_id"]] = body["seq"]
                self.reports.append(body)
        return int(body["seq"])

    def reports_of(self, server_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.reports if r["server_id"] == server_id]

    def all_reports(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.reports)

    def wait_for_report(self, server_id: str, kind: str, timeout: float = 20.0) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            matching = [r for r in self.reports_of(server_id) if r["kind"] == kind]
            return matching[-1] if matching else None

        try:
            return wait_until(found, timeout)
        except AssertionError:
            seen = [
                {k: v for k, v in r.items() if k != "server_id"} for r in self.reports_of(server_id)
            ]
            raise AssertionError(
                f"no {kind!r} report within {timeout} s; its reports: {seen}"
            ) from None


def _handler_for(plane: ControlPlane) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.headers.get("Authorization") != f"Bearer {plane.token}":
                return self.answer(401, {"error": {"code": "unauthorized"}})
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            try:
                MESSAGES.get(self.path, lambda body: body)(body)
            except ProtocolError as error:
                with plane.lock:
                    plane.malformed.append(f"{self.path}: {error.field}: {error}")
                return self.answer(400, {"error": {"code": "invalid_request"}})
            if self.path == HEARTBEAT_ROUTE:
                with plane.lock:
                    plane.heartbeats.append(body)
                return self.answer(200, HeartbeatAnswer.from_json(plane.heartbeat_answer).to_json())
            if self.path == REPORTS_ROUTE:
                if body["server_id"] in plane.refused:
                    return self.answer(403, {"error": {"code": "forbidden"}})
                return self.answer(200, {"acknowledged": plane.apply(body)})
            if self.path == CONSOLE_COMMAND_ROUTE and plane.console_commands:
                return self.answer(*plane.console_commands(body))
            if self.path == BACKUP_PARTS_ROUTE and plane.part_urls is not None:
                return self.answer(200, {"urls": plane.part_urls(body)})
            if self.path == "/api/node/v1/sftp-auth" and plane.sftp_auth is not None:
                return self.answer(*plane.sftp_auth(body))
            return self.answer(404, {"error": {"code": "not_found"}})

        def answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler
