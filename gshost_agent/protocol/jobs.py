"""A job on a server's data (`POST /v1/servers/{id}/jobs`, control plane -> agent): a backup,
restore, wipe or reinstall; its progress and end come back as reports."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from gshost_agent.protocol import fields
from gshost_agent.protocol.names import BACKUP_ID, JOB_ID, SHA256, ProtocolError, ServerState
from gshost_agent.protocol.start import plan_value_checked

OBJECT_STORAGE = "object_storage"  # a backup streamed to the bucket
LONGEST_URL = 8192


class JobKind(enum.StrEnum):
    BACKUP = "backup"
    RESTORE = "restore"
    WIPE = "wipe"
    REINSTALL = "reinstall"


@dataclass(frozen=True)
class JobRequest:
    """`backup_id` for a backup and a restore; `storage` for a backup to the bucket; `sha256`,
    `disk_mb` (its bound; without it, the plan the server last ran with) and, from the
    bucket, `download_url` (a presigned GET) and `size_bytes` for a restore; `settings` (the
    desired ones) and `empty` (a directory left empty, its settings file too: the game's next
    start writes it) for a reinstall. The agent keeps it (its members by name) while it runs."""

    job_id: str
    kind: JobKind
    game: str
    backup_id: str = ""
    sha256: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    storage: str = ""
    download_url: str = ""
    size_bytes: int = 0
    disk_mb: int | None = None
    empty: bool = False

    @property
    def needs_stopped(self) -> bool:
        return self.kind != JobKind.BACKUP

    def stops_game(self, state: ServerState) -> bool:
        """A restore of a running game stops it first and starts it again after."""
        return self.kind == JobKind.RESTORE and state == ServerState.RUNNING

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"job_id": self.job_id, "kind": str(self.kind), "game": self.game}
        if self.backup_id:
            body["backup_id"] = self.backup_id
        if self.storage:
            body["storage"] = self.storage
        if self.kind == JobKind.RESTORE:
            body["sha256"] = self.sha256
            if self.disk_mb is not None:
                body["disk_mb"] = self.disk_mb
            if self.download_url:
                body |= {"download_url": self.download_url, "size_bytes": self.size_bytes}
        if self.kind == JobKind.REINSTALL:
            body["settings"] = self.settings
            if self.empty:
                body["empty"] = True
        return body

    @classmethod
    def from_json(cls, body: Any) -> JobRequest:
        body = fields.obj(body, "body", "a JSON object")
        job_id, kind, game = body.get("job_id"), body.get("kind"), body.get("game")
        if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
            raise ProtocolError("job_id", "job_id: a job id (job_…)")
        if not isinstance(kind, str) or kind not in set(JobKind):
            raise ProtocolError("kind", f"kind: one of {', '.join(JobKind)}")
        if not isinstance(game, str):
            raise ProtocolError("game", "game: a game name is required")
        request = cls(job_id=job_id, kind=JobKind(kind), game=game)
        if request.kind in (JobKind.BACKUP, JobKind.RESTORE):
            backup_id = body.get("backup_id")
            if not isinstance(backup_id, str) or not BACKUP_ID.fullmatch(backup_id):
                raise ProtocolError("backup_id", "backup_id: a backup id (bkp_…)")
            request = replace(request, backup_id=backup_id)
        if request.kind == JobKind.BACKUP:
            storage = body.get("storage", "")
            if storage not in ("", OBJECT_STORAGE):
                raise ProtocolError("storage", f"storage: {OBJECT_STORAGE}, or none (on this node)")
            request = replace(request, storage=storage)
        if request.kind == JobKind.RESTORE:
            request = _restore(request, body)
        if request.kind == JobKind.REINSTALL:
            settings, empty = body.get("settings", {}), body.get("empty", False)
            if not isinstance(settings, dict):
                raise ProtocolError("settings", "settings: an object")
            if not isinstance(empty, bool):
                raise ProtocolError("empty", "empty: true (no settings file either) or false")
            request = replace(request, settings=settings, empty=empty)
        return request


def _restore(request: JobRequest, body: dict[str, Any]) -> JobRequest:
    sha256 = body.get("sha256")
    if not isinstance(sha256, str) or not SHA256.fullmatch(sha256):
        raise ProtocolError("sha256", "sha256: the archive's SHA-256 (64 lowercase hex digits)")
    disk_mb = body.get("disk_mb")
    if disk_mb is not None:
        try:
            plan_value_checked("disk_mb", disk_mb)
        except ProtocolError:
            raise ProtocolError("disk_mb", "disk_mb: the server's disk limit in MB") from None
    request = replace(request, sha256=sha256, disk_mb=disk_mb)
    url = body.get("download_url")
    if url is None:
        return request  # from this node's own backups
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        raise ProtocolError("download_url", "download_url: an http(s) URL")
    if len(url) > LONGEST_URL:
        raise ProtocolError("download_url", f"download_url: at most {LONGEST_URL} characters")
    size = body.get("size_bytes")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 < size < 2**63:
        raise ProtocolError("size_bytes", "size_bytes: the archive's size in bytes")
    return replace(request, download_url=url, size_bytes=size)
