"""Starting and stopping real game processes through the agent's API, and what it reports."""

from __future__ import annotations

import time

import psutil

from tests.agent.conftest import new_server_id, wait_for_exit
from tests.agent.lines import wait_until


def test_it_reports_ready_when_the_ready_line_appears(agent, control_plane):
    server_id, _ = agent.start_server()
    report = control_plane.wait_for_report(server_id, "ready")
    assert report["pid"] == agent.game_pid(server_id)
    assert report["seq"] >= 1 and report["outbox_id"]
    assert agent.state_of(server_id) == "running"


def test_it_says_starting_until_the_ready_line(agent, control_plane):
    server_id, _ = agent.start_server("silent")
    assert agent.state_of(server_id) == "starting"


def test_it_stops_a_game_with_its_stop_command_and_reports_halted(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    pid = agent.game_pid(server_id)
    answer = agent.request("POST", f"/v1/servers/{server_id}/stop")
    assert answer.status_code == 202
    assert answer.json() == {"state": "stopping"}
    report = control_plane.wait_for_report(server_id, "halted")
    assert report["exit_code"] == 0 and report["signal"] is None
    assert report["last_output"][-1] == "stopping"
    wait_for_exit(pid)
    assert agent.state_of(server_id) == "stopped"


def test_it_kills_a_game_that_ignores_its_stop_command_after_the_timeout(agent, control_plane):
    server_id, _ = agent.start_server("stubborn")
    control_plane.wait_for_report(server_id, "ready")
    asked = time.monotonic()
    agent.request("POST", f"/v1/servers/{server_id}/stop")
    report = control_plane.wait_for_report(server_id, "halted")
    assert report["signal"] == 9
    assert time.monotonic() - asked >= 2


def test_it_refuses_to_stop_a_server_that_does_not_run(agent):
    answer = agent.request("POST", "/v1/servers/srv_0000000000000000nope/stop")
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "invalid_state"


def test_it_refuses_to_start_a_server_that_runs(agent, control_plane):
    server_id, port = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    body = {"game": "demo", "port": port, "memory_mb": 256}
    answer = agent.request("POST", f"/v1/servers/{server_id}/start", body)
    assert answer.status_code == 409


def test_it_reports_a_kill_as_a_crash_by_signal_9(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    assert agent.request("POST", f"/v1/servers/{server_id}/kill").status_code == 202
    report = control_plane.wait_for_report(server_id, "crashed")
    assert report["signal"] == 9 and report["exit_code"] is None and report["oom"] is False
    assert "ready on port" in report["last_output"][0]


def test_it_takes_a_clean_exit_nobody_asked_for_as_a_crash(agent, control_plane):
    server_id, _ = agent.start_server("stubborn")  # `stop` is not this template's stop command
    control_plane.wait_for_report(server_id, "ready")
    agent.console(server_id, "stop")
    report = control_plane.wait_for_report(server_id, "crashed")
    assert report["exit_code"] == 0 and report["signal"] is None


def test_it_takes_the_console_stop_command_as_a_stop_request(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    assert agent.console(server_id, "stop").status_code == 200
    report = control_plane.wait_for_report(server_id, "halted")
    assert report["exit_code"] == 0
    assert not [r for r in control_plane.reports_of(server_id) if r["kind"] == "crashed"]


def test_it_reports_failed_to_start_for_a_game_that_exits_before_ready(agent, control_plane):
    server_id, _ = agent.start_server("quitter")
    report = control_plane.wait_for_report(server_id, "failed_to_start")
    assert report["exit_code"] == 3
    assert report["last_output"] == ["cannot find the map"]


def test_it_kills_a_game_without_a_ready_line_in_time_as_failed_to_start(agent, control_plane):
    server_id, _ = agent.start_server("silent")
    pid = agent.game_pid(server_id)
    report = control_plane.wait_for_report(server_id, "failed_to_start")
    assert report["signal"] == 9
    wait_for_exit(pid)


def test_it_restarts_a_game_and_reports_ready_again(agent, control_plane):
    server_id, port = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    first = agent.game_pid(server_id)
    body = {"game": "demo", "port": port, "memory_mb": 256}
    answer = agent.request("POST", f"/v1/servers/{server_id}/restart", body)
    assert answer.status_code == 202 and answer.json() == {"state": "restarting"}
    wait_until(lambda: len([r for r in control_plane.reports_of(server_id)]) >= 2, 20)
    kinds = [r["kind"] for r in control_plane.reports_of(server_id)]
    assert kinds == ["ready", "ready"]
    assert agent.game_pid(server_id) != first


def test_it_stops_a_game_without_a_stop_command_with_its_stop_signal(agent, control_plane):
    server_id, _ = agent.start_server("snoop")  # stop_signal SIGTERM
    control_plane.wait_for_report(server_id, "ready")
    agent.request("POST", f"/v1/servers/{server_id}/stop")
    assert control_plane.wait_for_report(server_id, "halted")["signal"] == 15


def test_it_reports_a_crash_when_the_keeper_itself_is_killed(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    game = agent.game_pid(server_id)
    psutil.Process(agent.keeper_pid(server_id)).kill()
    report = control_plane.wait_for_report(server_id, "crashed")
    assert report["pid"] == game and report["exit_code"] is None
    assert "ready on port" in report["last_output"][0]
    wait_for_exit(game)  # nobody holds its console any more: it does not stay behind


def test_it_answers_500_and_stays_stopped_when_it_cannot_start_a_game(agent):
    server_id = new_server_id()
    body = {"game": "broken", "port": 27996, "memory_mb": 256}
    for _ in range(2):  # stopped, not stuck in `starting`: it can be tried again
        answer = agent.request("POST", f"/v1/servers/{server_id}/start", body)
        assert answer.status_code == 500
        assert answer.json()["error"]["code"] == "internal_error"
    assert agent.state_of(server_id) == "stopped"
