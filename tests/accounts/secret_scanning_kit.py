"""What the secret-scanning tests share: GitHub's side of the exchange, played locally.

A key pair of our own signs alerts the way GitHub does (ECDSA P-256 / SHA-256 over the raw
body, base64 DER), and a real HTTP server on 127.0.0.1 publishes its public key in GitHub's
document format; SECRET_SCANNING_KEYS_URL points at it.
"""

import base64
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

GITHUB_ROUTE = "/integrations/secret-scanning/github"
KEY_IDENTIFIER = "90a421169f0a406205f1563a953312f0be898d3c7b6c06b681aa86a874555f4a"


def public_pem(private_key: ec.EllipticCurvePrivateKey) -> str:
    return (
        private_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def sign(private_key: ec.EllipticCurvePrivateKey, body: bytes) -> str:
    return base64.b64encode(private_key.sign(body, ec.ECDSA(hashes.SHA256()))).decode()


@dataclass
class KeysServer:
    """GitHub's public keys endpoint: counts fetches, can be taken down."""

    url: str = ""
    document: dict[str, Any] = field(default_factory=dict)
    fetches: int = 0
    down: bool = False


def serve_keys(server_state: KeysServer) -> Iterator[KeysServer]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            server_state.fetches += 1
            if server_state.down:
                self.send_response(502)
                self.end_headers()
                return
            body = json.dumps(server_state.document).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    server_state.url = (
        f"http://127.0.0.1:{httpd.server_address[1]}/meta/public_keys/secret_scanning"
    )
    try:
        yield server_state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@dataclass
class GitHub:
    """Signs and sends alerts as GitHub would."""

    private_key: ec.EllipticCurvePrivateKey
    keys: KeysServer
    identifier: str = KEY_IDENTIFIER

    def publish(self) -> None:
        self.keys.document = {
            "public_keys": [
                {
                    "key_identifier": self.identifier,
                    "key": public_pem(self.private_key),
                    "is_current": True,
                }
            ]
        }

    def headers(self, body: bytes, **overrides: str) -> dict[str, str]:
        headers = {
            "HTTP_GITHUB_PUBLIC_KEY_IDENTIFIER": self.identifier,
            "HTTP_GITHUB_PUBLIC_KEY_SIGNATURE": sign(self.private_key, body),
        }
        headers.update(overrides)
        return headers


def alert_body(*tokens: str, url: str = "https://github.com/octo/app/blob/main/.env") -> bytes:
    return json.dumps(
        [{"token": t, "type": "gshost_api_key", "url": url, "source": "content"} for t in tokens]
    ).encode()
