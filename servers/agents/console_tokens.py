"""Console session tokens: short-lived JWTs (EdDSA, Ed25519) that open a server's console
websocket on its node, for one API key or one person (docs/console.md).

The control plane signs; agents hold only the public keys (sent in every heartbeat's answer),
so nothing on a node can mint one. Every web process derives the same signing keys from
`CONSOLE_TOKEN_SECRETS` (default: SECRET_KEY): the first signs, every one is published, so a
rotation is "put a new secret first, keep the old one listed for the tokens' 5 minutes, then
drop it". Issuing never calls the node.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from urllib.parse import urlsplit

import jwt
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from accounts.scopes import Scope
from gshost import process_state
from gshost_agent.protocol import CONSOLE_SOCKET_PATH, console_subject
from servers.errors import LiveConsoleNotSupported
from servers.models import Server
from servers.runtime import host_traits
from servers.suspension import refuse_if_suspended

TOKEN_SECONDS = 300
ALGORITHM = "EdDSA"


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private: Ed25519PrivateKey
    public_raw: bytes

    def published(self) -> dict[str, str]:
        """The public half as the agents take it: a JWK (OKP, Ed25519) with its kid."""
        x = base64.urlsafe_b64encode(self.public_raw).rstrip(b"=").decode()
        return {"kty": "OKP", "crv": "Ed25519", "kid": self.kid, "x": x}


def _derive(secret: str) -> SigningKey:
    seed = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"gshost console tokens", info=b"ed25519"
    ).derive(secret.encode())
    private = Ed25519PrivateKey.from_private_bytes(seed)
    public_raw = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    kid = base64.urlsafe_b64encode(hashlib.sha256(public_raw).digest()[:9]).decode()
    return SigningKey(kid=kid, private=private, public_raw=public_raw)


@cache
def _keys(configured: tuple[str, ...], secret_key: str) -> tuple[SigningKey, ...]:
    return tuple(_derive(secret) for secret in (configured or (secret_key,)))


def signing_keys() -> tuple[SigningKey, ...]:
    """Every key agents accept, the signing one first."""
    configured = tuple(s.strip() for s in settings.CONSOLE_TOKEN_SECRETS if s.strip())
    return _keys(configured, settings.SECRET_KEY)


def published_keys() -> list[dict[str, str]]:
    return [key.published() for key in signing_keys()]


def panel_origins() -> list[str]:
    """Where a browser may open a console socket from: PANEL_URL's origin and PANEL_ORIGINS."""
    found = []
    for url in [settings.PANEL_URL, *settings.PANEL_ORIGINS]:
        parts = urlsplit(url.strip())
        if parts.scheme in ("http", "https") and parts.netloc:
            origin = f"{parts.scheme}://{parts.netloc}".lower()
            if origin not in found:
                found.append(origin)
    return found


def socket_url(server: Server) -> str:
    """wss://<node address>:<agent port>/api/v1/servers/<id>/console."""
    parts = urlsplit(server.node.url)
    host = server.node.address or parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = parts.port or 443
    return f"wss://{host}:{port}{CONSOLE_SOCKET_PATH.format(server_id=server.id)}"


@dataclass(frozen=True)
class ConsoleSession:
    url: str
    token: str
    expires_at: datetime
    scopes: list[str]


def console_session_issue(
    *,
    server: Server,
    granted: frozenset[str],
    key_id: str | None = None,
    person_id: int | None = None,
    subject_expires_at: datetime | None = None,
) -> ConsoleSession:
    """A token for `server` on its node, for the key or the person, granting `servers:read`
    and `console:write` when `granted` holds it. `subject_expires_at` (the key's expiry) is
    carried as `key_exp`: the agent ends the socket with 4403 then."""
    refuse_if_suspended(server)
    if not host_traits(server.node).serves_live_console:
        raise LiveConsoleNotSupported()
    scopes = [Scope.SERVERS_READ.value]
    if Scope.CONSOLE_WRITE in granted:
        scopes.append(Scope.CONSOLE_WRITE.value)
    now = time.time()
    expires = int(now) + TOKEN_SECONDS
    claims: dict[str, object] = {
        "aud": server.node.name,
        "sub": console_subject(key_id=key_id, person_id=person_id),
        "server": server.id,
        "org": server.organization_id,
        "scopes": scopes,
        "jti": secrets.token_urlsafe(16),
        "iat": round(now, 3),  # to the millisecond: compared with withdrawals' times
        "exp": expires,
    }
    if subject_expires_at is not None:
        claims["key_exp"] = round(subject_expires_at.timestamp(), 3)
    key = signing_keys()[0]
    token = jwt.encode(claims, key.private, algorithm=ALGORITHM, headers={"kid": key.kid})
    return ConsoleSession(
        url=socket_url(server),
        token=token,
        expires_at=datetime.fromtimestamp(expires, UTC),
        scopes=scopes,
    )


process_state.register(
    "servers.agents.console_tokens",
    bound="the signing keys of each (CONSOLE_TOKEN_SECRETS, SECRET_KEY) pair in use: one",
    reset=_keys.cache_clear,
)
