"""A move of a stopped server's data between agents (docs/agent-protocol.md, "Transfers"): the
control plane tells the target to expect it, the source to send it (or the target to fetch it
from the bucket); each side answers with the archive's receipt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gshost_agent.protocol import fields
from gshost_agent.protocol.names import SHA256, ProtocolError
from gshost_agent.protocol.start import DEFAULT_PLAN, plan_value_checked

TOKEN_LENGTHS = range(32, 201)  # a transfer token's, in characters


def _token(body: dict[str, Any]) -> str:
    token = body.get("token")
    if not isinstance(token, str) or len(token) not in TOKEN_LENGTHS:
        raise ProtocolError("token", "token: the transfer token (32 to 200 characters)")
    return token


def _sha256(body: dict[str, Any]) -> str:
    sha256 = body.get("sha256")
    if not isinstance(sha256, str) or not SHA256.fullmatch(sha256):
        raise ProtocolError("sha256", "sha256: the archive's SHA-256 (64 hex digits)")
    return sha256


def _size(body: dict[str, Any]) -> int:
    size = body.get("size_bytes")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 < size < 2**63:
        raise ProtocolError("size_bytes", "size_bytes: the archive's size in bytes")
    return size


@dataclass(frozen=True)
class TransferExpected:
    """`POST /v1/transfers/{id}` (to the target): the server's data comes, under `token`
    (valid `valid_seconds`), and its content must fit in `disk_mb`."""

    token: str
    game: str
    valid_seconds: int
    disk_mb: int = DEFAULT_PLAN.disk_mb

    def to_json(self) -> dict[str, Any]:
        return {"token": self.token, "game": self.game, "valid_seconds": self.valid_seconds,
                "disk_mb": self.disk_mb}  # fmt: skip

    @classmethod
    def from_json(cls, body: Any) -> TransferExpected:
        body = fields.obj(body, "body", "a JSON object")
        token, game, seconds = _token(body), body.get("game"), body.get("valid_seconds")
        if not isinstance(game, str):
            raise ProtocolError("game", "game: a game name is required")
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 1:
            raise ProtocolError("valid_seconds", "valid_seconds: a number of seconds")
        disk_mb = plan_value_checked("disk_mb", body.get("disk_mb", DEFAULT_PLAN.disk_mb))
        return cls(token=token, game=game, valid_seconds=seconds, disk_mb=disk_mb)


@dataclass(frozen=True)
class TransferSend:
    """`POST /v1/servers/{id}/transfer` (to the source): send the data to the target agent at
    `target_url`, verified against `target_ca` (PEM; empty: the system's CAs)."""

    target_url: str
    target_ca: str
    token: str

    def to_json(self) -> dict[str, Any]:
        return {"target_url": self.target_url, "target_ca": self.target_ca, "token": self.token}

    @classmethod
    def from_json(cls, body: Any) -> TransferSend:
        body = fields.obj(body, "body", "a JSON object")
        token, target_url, ca_pem = _token(body), body.get("target_url"), body.get("target_ca")
        if not isinstance(target_url, str) or not target_url.startswith("https://"):
            raise ProtocolError("target_url", "target_url: the target agent's https:// URL")
        if not isinstance(ca_pem, str):
            raise ProtocolError("target_ca", "target_ca: PEM text, or empty for the system's")
        return cls(target_url=target_url, target_ca=ca_pem, token=token)


@dataclass(frozen=True)
class TransferFetch:
    """`POST /v1/transfers/{id}/fetch` (to the target): fetch the archive from the bucket."""

    url: str
    sha256: str
    size_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "sha256": self.sha256, "size_bytes": self.size_bytes}

    @classmethod
    def from_json(cls, body: Any) -> TransferFetch:
        body = fields.obj(body, "body", "a JSON object")
        url = body.get("url")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise ProtocolError("url", "url: the archive's presigned http(s) URL")
        return cls(url=url, sha256=_sha256(body), size_bytes=_size(body))


@dataclass(frozen=True)
class ArchiveReceipt:
    """What an agent holds of an archive sent or fetched: its size and SHA-256."""

    size_bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"size_bytes": self.size_bytes, "sha256": self.sha256}

    @classmethod
    def from_json(cls, body: Any) -> ArchiveReceipt:
        body = fields.obj(body, "body", "a JSON object")
        size = body.get("size_bytes")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ProtocolError("size_bytes", "size_bytes: the archive's size in bytes")
        sha256 = body.get("sha256")
        if not isinstance(sha256, str):
            raise ProtocolError("sha256", "sha256: the archive's SHA-256")
        return cls(size_bytes=size, sha256=sha256.lower())
