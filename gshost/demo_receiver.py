"""The demo's webhook receiver: a local HTTPS endpoint that prints what it receives.

`make run` starts it beside the web and worker processes, so a newcomer sees a signed delivery
arrive without any network. Development only: its certificate comes from a throw-away `trustme`
CA written to ``--ca-file`` (the service trusts it through ``WEBHOOK_CA_BUNDLE``), and it checks
``X-Webhook-Signature`` with the signing secret that ``manage.py demo`` writes to
``--secret-file`` (read again on every request, so the secret may appear after start-up).

    python -m gshost.demo_receiver --port 8443 --ca-file run/demo-ca.pem \\
        --secret-file run/demo-webhook-secret
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import signal
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEFAULT_HOST = "receiver.gshost-demo.example"
DEFAULT_PORT = 8443
REPLAY_WINDOW_SECONDS = 300


def verify(secret: str, timestamp: str | None, signature: str | None, body: bytes) -> str:
    """'verified', or why not: the receiver-side check of docs/webhook-signatures.md."""
    if not secret:
        return "not checked (no signing secret yet)"
    if not timestamp or not signature:
        return "REJECTED: a signature header is missing"
    if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > REPLAY_WINDOW_SECONDS:
        return "REJECTED: timestamp outside the 300 s window"
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    if not hmac.compare_digest(expected.hexdigest(), signature):
        return "REJECTED: signature does not match"
    return "verified"


def describe(headers: Any, body: bytes, outcome: str) -> str:
    try:
        payload = json.loads(body)
    except ValueError:
        payload = {}
    kind = headers.get("X-Webhook-Event") or payload.get("event") or payload.get("type") or "?"
    server = (payload.get("server") or {}).get("name") if isinstance(payload, dict) else None
    delivery = headers.get("X-Webhook-Delivery") or "(test ping)"
    where = f" server={server!r}" if server else ""
    return f"[receiver] {kind}{where} delivery={delivery} signature {outcome}"


_output_lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        secret = self.server.read_secret()
        outcome = verify(
            secret,
            self.headers.get("X-Webhook-Timestamp"),
            self.headers.get("X-Webhook-Signature"),
            body,
        )
        summary = describe(self.headers, body, outcome)
        report = f"{summary}\n[receiver]   {body.decode(errors='replace')}\n"
        with _output_lock:  # handler threads print whole reports, never interleaved
            sys.stdout.write(report)
            sys.stdout.flush()
        status = 200 if outcome == "verified" or not secret else 401
        reply = json.dumps({"received": True, "signature": outcome}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per delivery is printed by do_POST


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, secret_file: Path | None) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.secret_file = secret_file

    def read_secret(self) -> str:
        if self.secret_file is None or not self.secret_file.is_file():
            return ""
        return self.secret_file.read_text().strip()


def serve(host: str, port: int, ca_file: Path, secret_file: Path | None) -> None:
    import trustme  # a development dependency, like this receiver

    # Bound first: while another receiver holds the port, the CA it serves with stays as it is.
    server = _Server(port, secret_file)
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert(host).configure_cert(context)
    ca_file.parent.mkdir(parents=True, exist_ok=True)
    partial = ca_file.with_name(ca_file.name + ".partial")
    ca.cert_pem.write_to_path(str(partial))
    partial.replace(ca_file)  # whole or absent: the service never reads half a CA
    # The handshake happens on the handler thread, so one silent client cannot stall the rest.
    server.socket = context.wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"[receiver] listening on https://{host}:{port}/hook (127.0.0.1)", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=DEFAULT_HOST, help="name on the certificate")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--ca-file", type=Path, required=True, help="where to write the CA")
    parser.add_argument("--secret-file", type=Path, help="file holding the signing secret")
    args = parser.parse_args(argv)
    serve(args.host, args.port, args.ca_file, args.secret_file)


if __name__ == "__main__":
    main()
