"""The agent stopped, killed or upgraded while its games go on: when it is back it has them
again (same processes), and an exit that happened meanwhile is reported."""

from __future__ import annotations

import json
import signal
import socket

import psutil
import pytest

from tests.agent.conftest import wait_for_exit
from tests.agent.lines import wait_until


@pytest.fixture
def agent(make_agent):
    first = make_agent()
    first.start()
    return first


def test_it_leaves_the_games_running_when_it_ends(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    pid = agent.game_pid(server_id)
    assert agent.end(signal.SIGTERM) == 0
    assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


def test_it_reattaches_to_a_running_game_after_a_sigkill(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    pid = agent.game_pid(server_id)
    agent.end(signal.SIGKILL)
    agent.start()
    assert agent.state_of(server_id) == "running"
    assert agent.game_pid(server_id) == pid
    agent.console(server_id, "say still here")
    agent.wait_for_console(server_id, r"^\[say\] still here$")
    assert [r["kind"] for r in control_plane.reports_of(server_id)] == ["ready"]


def test_it_detects_a_crash_after_it_came_back(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    pid = agent.game_pid(server_id)
    agent.end(signal.SIGKILL)
    agent.start()
    psutil.Process(pid).kill()
    report = control_plane.wait_for_report(server_id, "crashed")
    assert report["signal"] == 9 and report["pid"] == pid


def test_it_stops_a_game_it_reattached_to(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    agent.end(signal.SIGKILL)
    agent.start()
    assert agent.request("POST", f"/v1/servers/{server_id}/stop").status_code == 202
    assert control_plane.wait_for_report(server_id, "halted")["exit_code"] == 0


def test_it_reports_a_game_that_crashed_while_it_was_away(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    pid = agent.game_pid(server_id)
    agent.end(signal.SIGKILL)
    psutil.Process(pid).kill()
    wait_for_exit(pid)
    wait_for_exit(agent.keeper_pid(server_id))
    agent.start()
    report = control_plane.wait_for_report(server_id, "crashed")
    assert report["signal"] == 9 and report["exit_code"] is None
    assert agent.state_of(server_id) == "stopped"


def test_it_reports_the_exit_code_of_a_game_that_ended_while_it_was_away(agent, control_plane):
    server_id, _ = agent.start_server("stubborn")
    control_plane.wait_for_report(server_id, "ready")
    keeper = agent.keeper_pid(server_id)
    agent.console(server_id, "say bye")
    agent.wait_for_console(server_id, r"^\[say\] bye$")
    agent.end(signal.SIGKILL)
    # Nobody asked it to stop (`stop` is not this template's stop command): it just ended.
    _write_to_console_without_agent(agent, server_id, "stop")
    wait_for_exit(keeper)
    agent.start()
    report = control_plane.wait_for_report(server_id, "crashed")
    assert report["exit_code"] == 0 and report["last_output"][-1] == "stopping"


def test_it_reports_halted_for_a_stop_it_asked_for_before_it_went_away(agent, control_plane):
    server_id, _ = agent.start_server("stubborn")  # ignores its stop command: killed after 2 s
    control_plane.wait_for_report(server_id, "ready")
    keeper = agent.keeper_pid(server_id)
    agent.request("POST", f"/v1/servers/{server_id}/stop")
    agent.end(signal.SIGKILL)
    _write_to_console_without_agent(agent, server_id, "stop")
    wait_for_exit(keeper)
    agent.start()
    assert control_plane.wait_for_report(server_id, "halted")["exit_code"] == 0
    assert not [r for r in control_plane.reports_of(server_id) if r["kind"] == "crashed"]


def _write_to_console_without_agent(agent, server_id: str, command: str) -> None:
    """Talks to the keeper as the agent would."""
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(str(agent.run_dir(server_id) / "keeper.sock"))
        client.sendall(json.dumps({"op": "write", "text": command}).encode() + b"\n")
        assert json.loads(client.makefile().readline()) == {"ok": True}


def test_it_reports_an_exit_once_when_it_died_before_noting_the_report(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    agent.request("POST", f"/v1/servers/{server_id}/kill")
    control_plane.wait_for_report(server_id, "crashed")
    agent.end(signal.SIGKILL)
    # As if it had died between making the report and noting that it did.
    intent_file = agent.run_dir(server_id) / "intent.json"
    intent = json.loads(intent_file.read_text())
    intent_file.write_text(json.dumps({**intent, "active": True}))
    agent.start()
    wait_until(lambda: json.loads(intent_file.read_text())["active"] is False)
    assert [r["kind"] for r in control_plane.reports_of(server_id)] == ["ready", "crashed"]
    assert control_plane.repeats == 0


def test_it_numbers_console_lines_on_after_it_came_back(agent, control_plane):
    server_id, port = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    agent.request("POST", f"/v1/servers/{server_id}/stop")
    control_plane.wait_for_report(server_id, "halted")
    last = agent.request("GET", f"/v1/servers/{server_id}/console").json()["last"]
    agent.end(signal.SIGKILL)
    agent.start()
    agent.start_server(server_id=server_id, port=port)
    wait_until(lambda: len(control_plane.reports_of(server_id)) == 3)
    lines = agent.request("GET", f"/v1/servers/{server_id}/console").json()["lines"]
    assert lines[0]["n"] == last + 1 and lines[0]["text"].startswith("ready on port")


def test_it_still_reads_a_server_that_was_stopped_before_it_came_back(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    agent.request("POST", f"/v1/servers/{server_id}/stop")
    control_plane.wait_for_report(server_id, "halted")
    agent.end(signal.SIGKILL)
    agent.start()
    stats = agent.request("GET", f"/v1/servers/{server_id}/stats").json()
    assert stats["state"] == "stopped" and stats["memory_limit_mb"] == 256
    players = agent.request("GET", f"/v1/servers/{server_id}/players").json()
    assert players == {"count": 0, "max": 20, "players": []}
