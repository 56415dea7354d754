"""Reports reach the control plane once each, in order, whatever happens to the network or the
agent meanwhile; and the heartbeat says the agent is there."""

from __future__ import annotations

import signal

from tests.agent.conftest import new_server_id
from tests.agent.lines import wait_until


def test_it_sends_a_heartbeat_with_its_outbox_and_servers(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    heartbeat = wait_until(lambda: control_plane.heartbeats and control_plane.heartbeats[0])
    assert heartbeat["agent_version"] and heartbeat["outbox_id"].startswith("obx_")
    assert heartbeat["outbox_id"] == control_plane.reports_of(server_id)[0]["outbox_id"]


def test_it_delivers_a_crash_once_the_control_plane_is_back(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    control_plane.down()
    agent.request("POST", f"/v1/servers/{server_id}/kill")
    wait_until(lambda: agent.state_of(server_id) == "stopped")
    pending = sorted((agent.data_dir / "outbox").glob("0*.json"))
    assert len(pending) == 1
    control_plane.up()
    report = control_plane.wait_for_report(server_id, "crashed")
    assert report["signal"] == 9
    wait_until(lambda: not list((agent.data_dir / "outbox").glob("0*.json")))
    assert [r["kind"] for r in control_plane.reports_of(server_id)] == ["ready", "crashed"]
    assert control_plane.repeats == 0


def test_it_delivers_reports_in_order_after_an_outage(agent, control_plane):
    control_plane.down()
    first, _ = agent.start_server()
    second, _ = agent.start_server("quitter")
    wait_until(lambda: agent.state_of(second) == "stopped")
    wait_until(lambda: agent.state_of(first) == "running")
    agent.request("POST", f"/v1/servers/{first}/stop")
    wait_until(lambda: agent.state_of(first) == "stopped")
    control_plane.up()
    wait_until(lambda: len(control_plane.reports) == 3, timeout=20)
    seqs = [r["seq"] for r in control_plane.reports]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    assert [r["kind"] for r in control_plane.reports_of(first)] == ["ready", "halted"]


def test_it_keeps_reports_when_it_is_killed_before_sending_them(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    control_plane.down()
    agent.request("POST", f"/v1/servers/{server_id}/kill")
    wait_until(lambda: agent.state_of(server_id) == "stopped")
    agent.end(signal.SIGKILL)
    control_plane.up()
    agent.start()
    report = control_plane.wait_for_report(server_id, "crashed")
    assert report["seq"] == 2
    assert [r["kind"] for r in control_plane.reports_of(server_id)] == ["ready", "crashed"]


def test_it_drops_a_report_the_control_plane_refuses_and_goes_on(agent, control_plane):
    refused = new_server_id()
    control_plane.refused.add(refused)
    agent.start_server("quitter", server_id=refused)
    wait_until(lambda: agent.state_of(refused) == "stopped")
    accepted, _ = agent.start_server("quitter")
    control_plane.wait_for_report(accepted, "failed_to_start")
    assert control_plane.reports_of(refused) == []
    wait_until(lambda: not list((agent.data_dir / "outbox").glob("0*.json")))


def test_its_heartbeat_lists_its_templates_the_operators_own_included(agent, control_plane):
    heartbeat = wait_until(lambda: control_plane.heartbeats and control_plane.heartbeats[0])
    assert {"demo", "freeciv", "quitter"} <= set(heartbeat["games"])


def test_its_heartbeat_lists_each_templates_capabilities(agent, control_plane):
    heartbeat = wait_until(lambda: control_plane.heartbeats and control_plane.heartbeats[0])
    listed = heartbeat["game_capabilities"]
    assert {"console", "players", "settings"} <= set(listed["demo"])
    assert listed["quitter"] == []  # an operator's template that lists none


def test_its_heartbeat_tells_the_capacity_of_its_machine(agent, control_plane):
    heartbeat = wait_until(lambda: control_plane.heartbeats and control_plane.heartbeats[0])
    capacity = heartbeat["capacity"]
    assert capacity["memory_mb"] > 0 and capacity["disk_mb"] > 0
    assert capacity["cpu_percent"] % 100 == 0 and capacity["cpu_percent"] >= 100


def test_its_heartbeat_carries_the_readings_of_a_running_server(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")

    def reading():
        readings = [beat.get("readings", {}) for beat in control_plane.heartbeats]
        return next((found[server_id] for found in readings if server_id in found), None)

    found = wait_until(reading, timeout=25)  # the next heartbeat, at most 10 s away
    assert found["memory_mb"] > 0 and found["uptime_seconds"] >= 0
    assert found["players"] == [] and found["max_players"] == 20
    assert found["settings"]["max-players"] == "20"  # its settings file, as on disk
