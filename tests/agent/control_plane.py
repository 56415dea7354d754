"""A stand-in control plane for a real `gshost-agent`: it checks the node token, applies each
report once per (outbox_id, seq) as the real one does, and keeps reports and heartbeats for
the caller to read. The agent tests (tests/agent/conftest.py) and the agent benchmarks
(bench/agent_*.py) both use it; it needs nothing beyond the standard library.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.agent.lines import wait_until

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

        return wait_until(found, timeout)


def _handler_for(plane: ControlPlane) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.headers.get("Authorization") != f"Bearer {plane.token}":
                return self.answer(401, {"error": {"code": "unauthorized"}})
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/internal/nodes/heartbeat":
                with plane.lock:
                    plane.heartbeats.append(body)
                return self.answer(200, {"node": "test"})
            if self.path == "/internal/nodes/reports":
                if body["server_id"] in plane.refused:
                    return self.answer(403, {"error": {"code": "forbidden"}})
                return self.answer(200, {"acknowledged": plane.apply(body)})
            if self.path == "/internal/nodes/backup-parts" and plane.part_urls is not None:
                return self.answer(200, {"urls": plane.part_urls(body)})
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
