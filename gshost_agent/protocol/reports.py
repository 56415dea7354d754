"""A report (`POST /internal/nodes/reports`, agent -> control plane): what a game process did
(`PROCESS_REPORTS`), how a job on a server's data goes (`JOB_REPORTS`), or what a person changed
in the server's files over SFTP (`files_changed`, for the audit). One a request, each with its
outbox's id and sequence number, so the control plane applies it once."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gshost_agent.protocol import fields
from gshost_agent.protocol.files import InvalidFilePath, file_path
from gshost_agent.protocol.names import (
    FILE_CHANGES,
    JOB_ID,
    JOB_REPORTS,
    OUTBOX_ID,
    PROCESS_REPORTS,
    SERVER_ID_IN_BODY,
    SHA256,
    ProtocolError,
    ReportKind,
    format_time,
    last_output,
    printable,
)

CRASH_REASONS = ("exited", "disk_limit")  # a `crashed` report's reason
MAX_ERROR = 500  # a job's error, in characters
MAX_SEQ = 2**62


@dataclass(frozen=True)
class Report:
    """`outbox_id` and `seq` are given by the agent's outbox (empty and 0 until then). A
    process report has `pid`, `exit_code`, `signal`, `oom`, `last_output` and, for a crash
    the agent caused, `reason`; a job report `job_id` and its `progress` (job_progress) or
    `succeeded`, `error`, `size_bytes` and `sha256` (job_finished); a `files_changed` report
    the `person_id` of the login, its `change` (a FILE_CHANGES name) and the `paths`."""

    server_id: str
    kind: ReportKind
    at: datetime | None = None
    outbox_id: str = ""
    seq: int = 0
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    oom: bool = False
    last_output: tuple[str, ...] = ()
    reason: str | None = None
    job_id: str | None = None
    progress: int | None = None
    succeeded: bool | None = None
    error: str | None = None
    size_bytes: int | None = None
    sha256: str | None = None
    person_id: str | None = None
    change: str | None = None
    paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "last_output", tuple(self.last_output))
        object.__setattr__(self, "paths", tuple(self.paths))

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "outbox_id": self.outbox_id,
            "seq": self.seq,
            "server_id": self.server_id,
            "kind": str(self.kind),
            "at": None if self.at is None else format_time(self.at),
        }
        if self.kind in PROCESS_REPORTS:
            body |= {
                "pid": self.pid,
                "exit_code": self.exit_code,
                "signal": self.signal,
                "oom": self.oom,
                "last_output": list(self.last_output),
            }
            if self.reason is not None:
                body["reason"] = self.reason
        elif self.kind == ReportKind.JOB_PROGRESS:
            body |= {"job_id": self.job_id, "progress": self.progress}
        elif self.kind == ReportKind.FILES_CHANGED:
            body |= {"person_id": self.person_id, "change": self.change, "paths": list(self.paths)}
        else:
            body |= {
                "job_id": self.job_id,
                "succeeded": self.succeeded,
                "error": self.error,
                "size_bytes": self.size_bytes,
                "sha256": self.sha256,
            }
        return body

    @classmethod
    def from_json(cls, body: Any) -> Report:
        body = fields.obj(body, "body", "a JSON object")
        seq = fields.integer(body.get("seq"), "seq", 1, MAX_SEQ - 1,
                             message="seq must be a positive integer.")  # fmt: skip
        kind = body.get("kind")
        if not isinstance(kind, str) or kind not in set(ReportKind):
            raise ProtocolError("kind", f"kind must be one of {', '.join(ReportKind)}.")
        reason = body.get("reason") or None  # an empty one is none
        if reason is not None and reason not in CRASH_REASONS:
            raise ProtocolError(
                "reason", f"reason must be one of {', '.join(CRASH_REASONS)}, or null."
            )
        report = cls(
            outbox_id=fields.required_text(body, "outbox_id", pattern=OUTBOX_ID),
            seq=seq,
            server_id=fields.required_text(body, "server_id", pattern=SERVER_ID_IN_BODY),
            kind=ReportKind(kind),
            at=fields.moment(body.get("at"), "at", optional=True),
            pid=fields.optional_int(body, "pid"),
            exit_code=fields.optional_int(body, "exit_code"),
            signal=fields.optional_int(body, "signal"),
            oom=fields.boolean(body, "oom", False),
            last_output=_last_output(body.get("last_output")),
            reason=reason,
        )
        if report.kind == ReportKind.FILES_CHANGED:
            return _with_change(report, body)
        return report if report.kind not in JOB_REPORTS else _with_job(report, body)


def _last_output(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    lines = fields.strings(value, "last_output", 2**31, "a list of strings")
    return tuple(last_output([printable(line) for line in lines]))


def _with_job(report: Report, body: dict[str, Any]) -> Report:
    job_id = fields.required_text(body, "job_id", pattern=JOB_ID)
    if report.kind == ReportKind.JOB_PROGRESS:
        progress = fields.integer(body.get("progress"), "progress", 0, 100,
                                  message="progress must be an integer from 0 to 100.")  # fmt: skip
        return _replaced(report, job_id=job_id, progress=progress)
    error = body.get("error")
    if error is not None and not isinstance(error, str):
        raise ProtocolError("error", "error must be a string or null.")
    size = body.get("size_bytes")
    if size is not None:
        message = "size_bytes must be a non-negative integer or null."
        size = fields.integer(size, "size_bytes", 0, 2**63 - 1, message=message)
    sha256 = body.get("sha256")
    if sha256 is not None and (not isinstance(sha256, str) or not SHA256.fullmatch(sha256)):
        raise ProtocolError("sha256", "sha256 must be 64 lowercase hex digits or null.")
    return _replaced(
        report,
        job_id=job_id,
        succeeded=fields.boolean(body, "succeeded"),
        error=None if error is None else printable(error)[:MAX_ERROR],
        size_bytes=size,
        sha256=sha256,
    )


def _with_change(report: Report, body: dict[str, Any]) -> Report:
    change = body.get("change")
    if not isinstance(change, str) or change not in FILE_CHANGES:
        raise ProtocolError("change", f"change must be one of {', '.join(FILE_CHANGES)}.")
    count = FILE_CHANGES[change]
    paths = body.get("paths")
    what = f"a list of {count} path{'s' if count > 1 else ''}"
    if not isinstance(paths, list) or len(paths) != count:
        raise ProtocolError("paths", f"paths must be {what}.")
    try:
        cleaned = tuple(file_path(path) for path in fields.strings(paths, "paths", count, what))
    except InvalidFilePath as invalid:
        raise ProtocolError("paths", f"paths: {invalid}.") from None
    person_id = fields.required_text(body, "person_id", longest=40)
    return _replaced(report, person_id=person_id, change=change, paths=cleaned)


def _replaced(report: Report, **changes: Any) -> Report:
    return replace(report, **changes)
