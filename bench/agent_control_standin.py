"""A stand-in control plane for the agent benchmarks: it acknowledges every report and
heartbeat of a real `gshost-agent` and keeps the reports for the benchmark to read; a
benchmark of backups to object storage sets PART_URLS to answer the agent's asks for part
URLs (`/internal/nodes/backup-parts`)."""

import json
import socket
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

REPORTS: list[dict] = []
PART_URLS: list[Callable[[dict], list[str]]] = []  # at most one: presigns the parts asked for


class ControlPlane(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("/reports"):
            REPORTS.append(body)
        if self.path.endswith("/backup-parts") and PART_URLS:
            answer = json.dumps({"urls": PART_URLS[0](body)}).encode()
        else:
            answer = json.dumps({"acknowledged": body.get("seq"), "node": "bench"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
