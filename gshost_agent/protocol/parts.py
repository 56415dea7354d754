"""A backup's part URLs (`POST /internal/nodes/backup-parts`, agent -> control plane): the
presigned URLs of the next parts of a backup's upload to the bucket, for the node making it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gshost_agent.protocol import fields
from gshost_agent.protocol.names import BACKUP_ID, ProtocolError

MAX_PART_NUMBER = 10_000  # S3's limit per upload
MAX_PART_URLS_PER_ASK = 64


@dataclass(frozen=True)
class PartUrlsRequest:
    """Parts `first` to `first + count - 1` of the backup's upload."""

    backup_id: str
    first: int
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"backup_id": self.backup_id, "first": self.first, "count": self.count}

    @classmethod
    def from_json(cls, body: Any) -> PartUrlsRequest:
        body = fields.obj(body, "body", "a JSON object")
        return cls(
            backup_id=fields.required_text(body, "backup_id", pattern=BACKUP_ID),
            first=fields.integer(body.get("first"), "first", 1, MAX_PART_NUMBER),
            count=fields.integer(body.get("count"), "count", 1, MAX_PART_URLS_PER_ASK),
        )


@dataclass(frozen=True)
class PartUrls:
    """The answer (200): the parts' URLs, in order from `first`."""

    urls: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"urls": list(self.urls)}

    @classmethod
    def from_json(cls, body: Any) -> PartUrls:
        body = fields.obj(body, "body", "a JSON object")
        if "urls" not in body:
            raise ProtocolError("urls", "urls must be a list of URLs.")
        return cls(fields.strings(body["urls"], "urls", MAX_PART_URLS_PER_ASK, "a list of URLs"))
