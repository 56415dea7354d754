"""What a game's exit was, and what its report says: the intent the agent kept (a stop asked
for, a restart, the game ready or not) decides between a stop, a failed start and a crash; the
keeper's exit record gives the details (exit code, signal, OOM kill, last output)."""

from __future__ import annotations

from typing import Any

from gshost_agent.protocol import ReportKind, last_output, parse_moment
from gshost_agent.server_state import Intent, StopReason


def exit_kind(intent: Intent) -> ReportKind | None:
    """What the end of a game was, judged by what the agent wanted of it (its intent); None
    when it is no end (a restart starts it again)."""
    if intent.stop == StopReason.RESTART and intent.restart_with is not None:
        return None  # not an end: the game starts again, `ready` says when it runs
    if intent.stop in (StopReason.HALT, StopReason.RESTART):
        return ReportKind.HALTED
    if intent.stop == StopReason.NODE:
        return ReportKind.STOPPED_BY_NODE
    if intent.stop == StopReason.FAIL or not intent.ready:
        return ReportKind.FAILED_TO_START
    return ReportKind.CRASHED


def exit_details(record: dict[str, Any], intent: Intent | None = None) -> dict[str, Any]:
    """The report's members (`gshost_agent.protocol.Report`) from the keeper's exit record,
    bounded as the wire allows; a crash the agent caused because the game's directory went
    over its disk limit says so (`"reason": "disk_limit"`)."""
    at = parse_moment(record.get("at"))
    details: dict[str, Any] = {} if at is None else {"at": at}
    if intent is not None and intent.disk_limit:
        details["reason"] = "disk_limit"
    return details | {
        "pid": record.get("pid"),
        "exit_code": record.get("exit_code"),
        "signal": record.get("signal"),
        "oom": bool(record.get("oom")),
        "last_output": last_output(list(record.get("last_output", []))),
    }


def exit_key(record: dict[str, Any]) -> str | None:
    """Which run of the game ended: its pid and start time."""
    if record.get("pid") is None or not record.get("started_at"):
        return None
    return f"{record['pid']}@{record['started_at']}"
