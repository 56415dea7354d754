"""What a game's exit was, from what the agent wanted of it (``gshost_agent.exits``)."""

from __future__ import annotations

import pytest

from gshost_agent.exits import exit_details, exit_key, exit_kind
from gshost_agent.protocol import ReportKind
from gshost_agent.server_state import Intent, StartRequest, StopReason

REQUEST = StartRequest(game="demo", port=27015, memory_mb=256)


@pytest.mark.parametrize(
    ("ready", "stop", "expected"),
    [
        (True, StopReason.NONE, ReportKind.CRASHED),
        (False, StopReason.NONE, ReportKind.FAILED_TO_START),
        (True, StopReason.FAIL, ReportKind.FAILED_TO_START),
        (True, StopReason.HALT, ReportKind.HALTED),
        (True, StopReason.RESTART, ReportKind.HALTED),
        (True, StopReason.NODE, ReportKind.STOPPED_BY_NODE),
    ],
)
def test_the_intent_decides_what_an_exit_was(
    ready: bool, stop: StopReason, expected: ReportKind
) -> None:
    assert exit_kind(Intent(REQUEST, ready=ready, stop=stop)) == expected


def test_a_restart_with_a_new_start_is_no_end() -> None:
    intent = Intent(REQUEST, ready=True, stop=StopReason.RESTART, restart_with=REQUEST)

    assert exit_kind(intent) is None


def test_the_details_keep_the_last_ten_lines_of_at_most_200_characters() -> None:
    record = {"pid": 7, "exit_code": None, "signal": 9, "last_output": ["x" * 300] * 12}

    details = exit_details(record)

    assert (details["signal"], details["oom"], len(details["last_output"])) == (9, False, 10)
    assert {len(line) for line in details["last_output"]} == {200}


def test_a_run_is_known_by_its_pid_and_start_time() -> None:
    assert exit_key({"pid": 7, "started_at": "2026-11-26T14:00:00Z"}) == "7@2026-11-26T14:00:00Z"
    assert exit_key({"pid": 7}) is None


def test_a_game_the_agent_stopped_for_its_disk_says_so() -> None:
    intent = Intent(REQUEST, ready=True, disk_limit=True)
    record = {"pid": 7, "exit_code": None, "signal": 9, "last_output": []}

    assert exit_kind(intent) == ReportKind.CRASHED
    assert exit_details(record, intent)["reason"] == "disk_limit"
    assert "reason" not in exit_details(record, Intent(REQUEST, ready=True))
