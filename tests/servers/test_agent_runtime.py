"""Servers on agent nodes: the control plane asks the node's agent over real HTTPS (a stand-in
agent with a trustme CA), and answers 503 node_unavailable when the node cannot be reached."""

import json
import socket
import threading
from io import StringIO

import pytest
import trustme
from django.core.management import CommandError, call_command
from django.test import Client
from freezegun import freeze_time

from audit.actors import Actor
from servers.agents.runtime import NodeRuntime
from servers.models import Node, RunStatus, Schedule, Server, ServerTransition
from servers.schedules import schedule_run_now
from servers.services import PowerAction, server_create, server_power
from tests.conftest import API, client_for, error_of
from tests.servers.node_fixtures import beat, register

SCOPES = ["servers:power", "console:write", "servers:read", "backups:create"]


@pytest.fixture
def key(make_key):
    return make_key(SCOPES)


def api_post(key, server, route, body):
    return client_for(key).post(f"{API}/servers/{server.id}/{route}", body, format="json")


def api_get(key, server, route):
    return client_for(key).get(f"{API}/servers/{server.id}/{route}")


def state_of(server):
    return Server.objects.get(id=server.id).state


def silence(node):
    """No heartbeat for a long time: the node is unreachable."""
    Node.objects.filter(id=node.id).update(last_heartbeat_at=None)


# Power


def test_a_start_asks_the_agent_with_the_game_port_memory_and_settings(
    key, demo_server, stand_in_agent
):
    response = api_post(key, demo_server, "power", {"action": "start"})
    assert response.status_code == 202
    assert response.json()["state"] == "starting"
    (call,) = stand_in_agent.calls("POST")
    assert call.path == f"/v1/servers/{demo_server.id}/start"
    assert call.authorization == f"Bearer {stand_in_agent.token}"
    assert call.body == {
        "game": "demo",
        "port": 27000,
        "memory_mb": 1024,
        "disk_mb": 10240,
        "cpu_percent": 100,
        "processes": 256,
        "settings": {"motd": "A gshost demo server", "max-players": "20", "difficulty": "normal"},
    }


def test_a_stop_asks_the_agent_to_stop(key, demo_server, stand_in_agent, put_in_state):
    put_in_state(demo_server, "running")
    assert api_post(key, demo_server, "power", {"action": "stop"}).status_code == 202
    assert stand_in_agent.calls("POST")[-1].path == f"/v1/servers/{demo_server.id}/stop"
    assert state_of(demo_server) == "stopping"


def test_a_restart_asks_the_agent_to_restart_with_the_start_body(
    key, demo_server, stand_in_agent, put_in_state
):
    put_in_state(demo_server, "running")
    assert api_post(key, demo_server, "power", {"action": "restart"}).status_code == 202
    call = stand_in_agent.calls("POST")[-1]
    assert call.path == f"/v1/servers/{demo_server.id}/restart"
    assert call.body["port"] == 27000


def test_a_start_the_agent_refuses_is_409_and_recorded_as_a_failed_start(
    key, demo_server, stand_in_agent, published
):
    path = f"/v1/servers/{demo_server.id}/start"
    refusal = {"error": {"code": "invalid_state", "message": "it runs"}}
    stand_in_agent.answer("POST", path, 409, refusal)
    response = api_post(key, demo_server, "power", {"action": "start"})
    assert response.status_code == 409
    assert error_of(response)["code"] == "invalid_state"
    assert state_of(demo_server) == "stopped"
    assert published[-1].event == "server.crashed"
    assert published[-1].data["reason"] == "failed_to_start"


def test_a_start_refused_for_a_port_its_node_holds_is_409_invalid_state_naming_the_port(
    key, demo_server, stand_in_agent
):
    refusal = {"error": {"code": "port_in_use", "message": "port 27000 is in use on this node"}}
    stand_in_agent.answer("POST", f"/v1/servers/{demo_server.id}/start", 409, refusal)
    response = api_post(key, demo_server, "power", {"action": "start"})
    assert response.status_code == 409
    assert error_of(response) == {
        "code": "invalid_state",
        "message": "Port 27000 is in use on node node-1 (by something other than this server's "
        "game): the server cannot start there.",
        "state": "stopped",
    }
    assert state_of(demo_server) == "stopped"


def test_a_start_refused_for_the_disk_limit_is_409_disk_limit_exceeded(
    key, demo_server, stand_in_agent
):
    refusal = {"error": {"code": "disk_limit_exceeded", "message": "over 10240 MB"}}
    stand_in_agent.answer("POST", f"/v1/servers/{demo_server.id}/start", 409, refusal)
    response = api_post(key, demo_server, "power", {"action": "start"})
    assert response.status_code == 409
    assert error_of(response) == {
        "code": "disk_limit_exceeded",
        "message": "The server's files are over its disk limit (10240 MB): delete some, or "
        "raise its plan's disk_mb, then start it.",
        "state": "stopped",
    }
    assert state_of(demo_server) == "stopped"


def test_a_stop_the_agent_refuses_is_409_and_leaves_the_server_running(
    key, demo_server, stand_in_agent, put_in_state
):
    put_in_state(demo_server, "running")
    refusal = {"error": {"code": "invalid_state", "message": "busy"}}
    stand_in_agent.answer("POST", f"/v1/servers/{demo_server.id}/stop", 409, refusal)
    response = api_post(key, demo_server, "power", {"action": "stop"})
    assert response.status_code == 409
    assert state_of(demo_server) == "running"


def test_a_start_on_an_unreachable_node_is_503_and_records_nothing(
    key, demo_server, agent_node, stand_in_agent
):
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=None)
    response = api_post(key, demo_server, "power", {"action": "start"})
    assert response.status_code == 503
    assert not ServerTransition.objects.filter(server=demo_server).exists()
    assert not stand_in_agent.calls()


# Console


def test_a_console_command_is_written_through_the_agent(
    key, demo_server, stand_in_agent, put_in_state, published
):
    put_in_state(demo_server, "running")
    response = api_post(key, demo_server, "console", {"command": "say hi"})
    assert response.status_code == 202
    call = stand_in_agent.calls("POST")[-1]
    assert call.path == f"/v1/servers/{demo_server.id}/console"
    assert call.body == {"command": "say hi"}
    assert published[-1].event == "console.command_sent"


def test_the_games_stop_command_makes_the_server_stopping(
    key, demo_server, stand_in_agent, put_in_state
):
    put_in_state(demo_server, "running")
    assert api_post(key, demo_server, "console", {"command": "stop"}).status_code == 202
    assert state_of(demo_server) == "stopping"
    assert stand_in_agent.calls("POST")[-1].body == {"command": "stop"}


def test_a_stop_command_the_node_cannot_take_leaves_the_server_running(
    key, demo_server, agent_node, put_in_state
):
    put_in_state(demo_server, "running")
    silence(agent_node)
    assert api_post(key, demo_server, "console", {"command": "stop"}).status_code == 503
    assert state_of(demo_server) == "running"


def test_a_stop_command_the_agent_refuses_leaves_the_server_running(
    key, demo_server, stand_in_agent, put_in_state
):
    put_in_state(demo_server, "running")
    path = f"/v1/servers/{demo_server.id}/console"
    stand_in_agent.answer("POST", path, 409, {"error": {"code": "invalid_state", "message": "no"}})
    assert api_post(key, demo_server, "console", {"command": "stop"}).status_code == 409
    assert state_of(demo_server) == "running"


def test_the_agent_runtime_sends_a_command_without_changing_the_state(
    demo_server, stand_in_agent, put_in_state
):
    put_in_state(demo_server, "running")
    NodeRuntime().send_command(demo_server, "stop")
    assert state_of(demo_server) == "running"


def test_a_command_the_agent_refuses_as_bad_is_400_and_fires_nothing(
    key, demo_server, stand_in_agent, put_in_state, published
):
    put_in_state(demo_server, "running")
    published.clear()
    path = f"/v1/servers/{demo_server.id}/console"
    stand_in_agent.answer("POST", path, 400, {"error": {"code": "bad", "message": "Too long."}})
    response = api_post(key, demo_server, "console", {"command": "say hi"})
    assert response.status_code == 400
    assert error_of(response)["fields"] == {"command": ["Too long."]}
    assert published == []


# Readings


READING = {
    "state": "running", "sampled_at": "2026-11-26T10:00:00Z", "cpu_percent": 3.5,
    "memory_mb": 40, "memory_limit_mb": 1024, "disk_mb": 2, "network_in_kbps": None,
    "network_out_kbps": None, "players_online": 1, "uptime_seconds": 60,
    "players": [{"name": "ann", "joined_at": "2026-11-26T10:00:00Z"}], "max_players": 20,
}  # fmt: skip


def heartbeat_with_reading(server, token):
    body = {
        "agent_version": "1", "outbox_id": "box-1", "servers": {server.id: "running"},
        "readings": {server.id: READING},
    }  # fmt: skip
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    response = Client().post(
        "/internal/nodes/heartbeat", json.dumps(body), content_type="application/json", **headers
    )
    assert response.status_code == 200


def test_players_are_those_of_the_nodes_last_heartbeat(
    key, demo_server, stand_in_agent, put_in_state, node_token
):
    put_in_state(demo_server, "running")
    heartbeat_with_reading(demo_server, node_token)
    body = api_get(key, demo_server, "players").json()
    assert body == {
        "count": 1,
        "max": 20,
        "players": [{"name": "ann", "joined_at": "2026-11-26T10:00:00.000Z"}],
    }
    assert not stand_in_agent.calls()


def test_realtime_stats_are_those_of_the_nodes_last_heartbeat_with_their_time(
    key, demo_server, stand_in_agent, put_in_state, node_token
):
    put_in_state(demo_server, "running")
    heartbeat_with_reading(demo_server, node_token)
    body = api_get(key, demo_server, "realtime-stats").json()
    assert (body["cpu_percent"], body["memory_mb"], body["uptime_seconds"]) == (3.5, 40, 60)
    assert body["sampled_at"] == "2026-11-26T10:00:00.000Z"
    assert body["network_in_kbps"] is None and body["network_out_kbps"] is None
    assert not stand_in_agent.calls()


def test_a_running_server_without_a_reported_reading_shows_idle_stats(
    key, demo_server, stand_in_agent, put_in_state
):
    put_in_state(demo_server, "running")
    body = api_get(key, demo_server, "realtime-stats").json()
    assert (body["cpu_percent"], body["players_online"]) == (0, 0)
    assert not stand_in_agent.calls()


def test_the_panel_page_of_an_agent_server_calls_no_node(
    alice_client, demo_server, stand_in_agent, put_in_state, node_token
):
    put_in_state(demo_server, "running")
    heartbeat_with_reading(demo_server, node_token)
    page = alice_client.get(f"/panel/servers/{demo_server.id}/").content.decode()
    assert "ann" in page
    assert not stand_in_agent.calls()


def heartbeat_with_minutes(server, token, minutes, reading=None):
    body = {
        "agent_version": "1", "outbox_id": "box-1", "servers": {server.id: "running"},
        "readings": {server.id: {**(reading or {}), "minutes": minutes}},
    }  # fmt: skip
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    response = Client().post(
        "/internal/nodes/heartbeat", json.dumps(body), content_type="application/json", **headers
    )
    assert response.status_code == 200


def minute(at, cpu=1.0, memory=30.0, players=0):
    return {"at": at, "cpu_percent": cpu, "memory_mb": memory, "players_online": players}


def metric(at, cpu, memory, players):
    return {"at": at, "cpu_percent": cpu, "memory_mb": memory, "network_in_kbps": None,
            "network_out_kbps": None, "players_online": players}  # fmt: skip


@freeze_time("2026-11-26 10:30:20")
def test_metrics_are_the_minutes_the_nodes_heartbeats_carried(
    key, demo_server, stand_in_agent, put_in_state, node_token
):
    put_in_state(demo_server, "running")
    minutes = [minute("2026-11-26T10:28:00Z", 1.24, 30.4, 0), minute("2026-11-26T10:29:00Z", 2.0,
               40.6, 2)]  # fmt: skip
    heartbeat_with_minutes(demo_server, node_token, minutes)
    body = api_get(key, demo_server, "metrics?window=1h").json()
    assert body["samples"] == [
        metric("2026-11-26T10:28:00.000Z", 1.2, 30, 0),
        metric("2026-11-26T10:29:00.000Z", 2.0, 41, 2),
    ]
    assert not stand_in_agent.calls()


@freeze_time("2026-11-26 10:30:20")
def test_metrics_over_a_long_window_are_the_means_of_each_steps_minutes(
    key, demo_server, put_in_state, node_token
):
    put_in_state(demo_server, "running")
    minutes = [
        minute("2026-11-26T10:24:00Z", 1.0, 10.0, 0),
        minute("2026-11-26T10:25:00Z", 2.0, 20.0, 1),
        minute("2026-11-26T10:26:00Z", 4.0, 31.0, 1),
    ]
    heartbeat_with_minutes(demo_server, node_token, minutes)
    body = api_get(key, demo_server, "metrics?window=6h").json()
    assert body["interval_seconds"] == 180
    assert body["samples"] == [metric("2026-11-26T10:24:00.000Z", 2.3, 20, 1)]


@freeze_time("2026-11-26 10:30:20")
def test_metrics_of_a_server_on_an_unreachable_node_are_its_history(
    key, demo_server, agent_node, stand_in_agent, put_in_state, node_token
):
    put_in_state(demo_server, "running")
    heartbeat_with_minutes(demo_server, node_token, [minute("2026-11-26T10:29:00Z")])
    silence(agent_node)
    response = api_get(key, demo_server, "metrics")
    assert response.status_code == 200
    assert [sample["at"] for sample in response.json()["samples"]] == ["2026-11-26T10:29:00.000Z"]
    assert stand_in_agent.requests == []


@freeze_time("2026-11-26 10:30:05")
def test_the_newest_step_the_node_sent_no_minute_of_is_its_latest_reading(
    key, demo_server, put_in_state, node_token
):
    put_in_state(demo_server, "running")
    reading = {**READING, "sampled_at": "2026-11-26T10:29:58Z"}  # the minute ended 5 s ago
    heartbeat_with_minutes(demo_server, node_token, [minute("2026-11-26T10:28:00Z")], reading)
    body = api_get(key, demo_server, "metrics?window=1h").json()
    assert body["samples"] == [
        metric("2026-11-26T10:28:00.000Z", 1.0, 30, 0),
        metric("2026-11-26T10:29:00.000Z", 3.5, 40, 1),
    ]


@freeze_time("2026-11-26 10:30:05")
def test_a_reading_taken_after_the_window_adds_no_sample(
    key, demo_server, put_in_state, node_token
):
    put_in_state(demo_server, "running")
    reading = {**READING, "sampled_at": "2026-11-26T10:30:03Z"}  # in the minute under way
    heartbeat_with_minutes(demo_server, node_token, [], reading)
    assert api_get(key, demo_server, "metrics?window=1h").json()["samples"] == []


def test_drift_compares_with_the_settings_file_the_node_last_reported(
    key, demo_server, stand_in_agent, node_token
):
    on_disk = {"motd": "A gshost demo server", "max-players": "50", "difficulty": "normal"}
    body = {
        "agent_version": "1", "outbox_id": "box-1", "servers": {demo_server.id: "stopped"},
        "readings": {demo_server.id: {"settings": on_disk}},
    }  # fmt: skip
    headers = {"HTTP_AUTHORIZATION": f"Bearer {node_token}"}
    Client().post(
        "/internal/nodes/heartbeat", json.dumps(body), content_type="application/json", **headers
    )
    body = api_get(key, demo_server, "settings/drift").json()
    assert body["drift"] == [{"key": "max-players", "desired": "20", "actual": "50"}]
    assert not stand_in_agent.calls()


def test_readings_of_a_server_the_agent_does_not_know_are_empty(key, demo_server):
    body = api_get(key, demo_server, "players").json()  # the stand-in answers 404
    assert (body["count"], body["max"], body["players"]) == (0, 20, [])


def test_stats_of_a_game_that_does_not_run_are_idle(key, demo_server, stand_in_agent):
    path = f"/v1/servers/{demo_server.id}/stats"
    stand_in_agent.answer("GET", path, 409, {"error": {"code": "invalid_state", "message": "no"}})
    body = api_get(key, demo_server, "realtime-stats").json()
    assert (body["state"], body["cpu_percent"], body["uptime_seconds"]) == ("stopped", 0.0, 0)


# Node outages: 503 node_unavailable, nothing done or queued

OUTAGE_ROUTES = [
    ("post", "power", {"action": "start"}, "stopped"),
    ("post", "power", {"action": "stop"}, "running"),
    ("post", "console", {"command": "say hi"}, "running"),
    ("get", "players", None, "running"),
    ("get", "realtime-stats", None, "running"),
    ("get", "settings/drift", None, "running"),
]


def _call(key, server, method, route, body):
    return api_post(key, server, route, body) if method == "post" else api_get(key, server, route)


@pytest.mark.parametrize(("method", "route", "body", "state"), OUTAGE_ROUTES)
def test_an_unreachable_node_is_503_with_retry_after_and_nothing_done(
    key, demo_server, agent_node, stand_in_agent, put_in_state, method, route, body, state
):
    put_in_state(demo_server, state)
    transitions = ServerTransition.objects.filter(server=demo_server).count()
    silence(agent_node)
    response = _call(key, demo_server, method, route, body)
    assert response.status_code == 503
    error = error_of(response)
    assert (error["code"], error["retry_after"]) == ("node_unavailable", 30)
    assert response["Retry-After"] == "30"
    assert stand_in_agent.requests == []
    assert state_of(demo_server) == state
    assert ServerTransition.objects.filter(server=demo_server).count() == transitions


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Players, stats and settings come from the node's heartbeats: an agent that heartbeats is
# not called for them.
FROM_HEARTBEATS = ("players", "realtime-stats", "settings/drift")
CALLS_TO_THE_AGENT = [route for route in OUTAGE_ROUTES if route[1] not in FROM_HEARTBEATS]


@pytest.mark.parametrize(("method", "route", "body", "state"), CALLS_TO_THE_AGENT)
def test_an_agent_that_refuses_connections_is_503(
    key, acme, put_in_state, method, route, body, state
):
    node, _ = register("down", url=f"https://127.0.0.1:{_closed_port()}")
    beat(node)
    server = server_create(
        actor=Actor.system("test"), organization=acme, name="Demo", game="demo", node=node
    )
    put_in_state(server, state)
    response = _call(key, server, method, route, body)
    assert response.status_code == 503
    assert error_of(response)["code"] == "node_unavailable"
    assert state_of(server) == state


def test_an_agent_that_refuses_connections_says_nothing_was_done(key, acme, put_in_state):
    node, _ = register("down", url=f"https://127.0.0.1:{_closed_port()}")
    beat(node)
    server = server_create(
        actor=Actor.system("test"), organization=acme, name="Demo", game="demo", node=node
    )
    put_in_state(server, "running")
    response = api_post(key, server, "power", {"action": "stop"})
    assert "Nothing was done" in error_of(response)["message"]


def test_a_stop_the_agent_answers_too_late_is_503_saying_it_may_still_happen(
    key, demo_server, stand_in_agent, put_in_state, monkeypatch
):
    monkeypatch.setattr("servers.agents.runtime.DEADLINE_SECONDS", 0.5)
    answered = threading.Event()
    stand_in_agent.on_request = lambda request: answered.wait(10)
    put_in_state(demo_server, "running")
    response = api_post(key, demo_server, "power", {"action": "stop"})
    answered.set()
    assert response.status_code == 503
    error = error_of(response)
    assert error["code"] == "node_unavailable"
    assert "did not answer in time" in error["message"]
    # Left running, as it was: if the node did stop it, its report says so (then stopped).
    assert state_of(demo_server) == "running"


def test_an_agent_whose_certificate_the_nodes_ca_did_not_sign_is_503(key, acme, stand_in_agent):
    other_ca = trustme.CA().cert_pem.bytes().decode()
    node, token = register("spoofed", url=stand_in_agent.url, ca_pem=other_ca)
    stand_in_agent.token = token
    beat(node)
    server = server_create(
        actor=Actor.system("test"), organization=acme, name="Demo", game="demo", node=node
    )
    assert api_post(key, server, "power", {"action": "start"}).status_code == 503
    assert stand_in_agent.requests == []


def test_proxies_from_the_environment_are_not_used(key, demo_server, stand_in_agent, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:1")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/nonexistent.pem")
    assert api_post(key, demo_server, "power", {"action": "start"}).status_code == 202


def test_a_schedule_on_an_unreachable_node_fails_its_run(
    demo_server, agent_node, put_in_state, alice
):
    put_in_state(demo_server, "running")
    schedule = Schedule.objects.create(
        server=demo_server, name="Save", cron="0 3 * * *", command="save", created_by=alice.user
    )
    silence(agent_node)
    run = schedule_run_now(schedule=schedule, actor=Actor.system("test"))
    assert run.status == RunStatus.FAILED
    assert "unavailable" in run.output


def test_a_schedule_run_is_succeeded_when_the_agent_accepted_it(
    demo_server, stand_in_agent, put_in_state, alice
):
    put_in_state(demo_server, "running")
    schedule = Schedule.objects.create(
        server=demo_server, name="Save", cron="0 3 * * *", command="save", created_by=alice.user
    )
    run = schedule_run_now(schedule=schedule, actor=Actor.system("test"))
    assert run.status == RunStatus.SUCCEEDED
    assert stand_in_agent.calls("POST")[-1].body == {"command": "save"}


def save_schedule(server, alice):
    return Schedule.objects.create(
        server=server, name="Save", cron="0 3 * * *", command="save", created_by=alice.user
    )


def test_a_schedule_of_a_server_that_does_not_run_is_skipped_without_asking_the_node(
    demo_server, stand_in_agent, alice
):
    run = schedule_run_now(schedule=save_schedule(demo_server, alice), actor=Actor.system("t"))
    assert run.status == RunStatus.SKIPPED
    assert stand_in_agent.requests == []


@pytest.mark.parametrize(("status", "code"), [(409, "invalid_state"), (400, "invalid_request")])
def test_a_schedule_command_the_node_refuses_fails_its_run(
    demo_server, stand_in_agent, put_in_state, alice, status, code
):
    put_in_state(demo_server, "running")
    path = f"/v1/servers/{demo_server.id}/console"
    stand_in_agent.answer("POST", path, status, {"error": {"code": code, "message": "nope"}})
    run = schedule_run_now(schedule=save_schedule(demo_server, alice), actor=Actor.system("t"))
    assert run.status == RunStatus.FAILED
    assert "nope" in run.output


# What the demo game supports on agent nodes


def test_the_demo_game_supports_its_data_jobs_and_migration(key, demo_server):
    body = api_get(key, demo_server, "capabilities").json()["capabilities"]
    assert all(entry["supported"] for entry in body.values())


# simulate on agent nodes


def simulate(*args):
    out = StringIO()
    call_command("simulate", *args, stdout=out)
    return out.getvalue()


def test_simulate_crash_kills_the_game_through_the_agent(
    demo_server, stand_in_agent, put_in_state, published
):
    put_in_state(demo_server, "running")
    published.clear()
    out = simulate(demo_server.id, "crash")
    assert stand_in_agent.calls("POST")[-1].path == f"/v1/servers/{demo_server.id}/kill"
    assert "SIGKILL" in out
    assert state_of(demo_server) == "running"  # until the agent reports the crash
    assert published == []


def test_simulate_crash_of_a_stopped_agent_server_is_refused(demo_server, stand_in_agent):
    with pytest.raises(CommandError, match="Only a running game can crash"):
        simulate(demo_server.id, "crash")
    assert stand_in_agent.requests == []


def test_simulate_fail_start_is_refused_on_agent_nodes(demo_server, stand_in_agent):
    with pytest.raises(CommandError, match="only for servers on the simulated node"):
        simulate(demo_server.id, "fail-start")
    assert state_of(demo_server) == "stopped"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((), "Name the agent node to move to"),
        (("--node", "nowhere"), "Name the agent node to move to"),
        (("--node", "node-1"), "is not another agent node"),
        (("--node", "simulated"), "is not another agent node"),
    ],
)
def test_simulate_migrate_on_an_agent_node_needs_another_agent_node(
    demo_server, stand_in_agent, arguments, message
):
    with pytest.raises(CommandError, match=message):
        simulate(demo_server.id, "migrate", *arguments)
    assert Server.objects.get(id=demo_server.id).address == "198.51.100.7:27000"
    assert stand_in_agent.requests == []


@pytest.mark.parametrize(
    ("path", "method"),
    [
        ("/api/public/v1/servers/{server_id}/power", "post"),
        ("/api/public/v1/servers/{server_id}/console", "post"),
        ("/api/public/v1/servers/{server_id}/players", "get"),
        ("/api/public/v1/servers/{server_id}/realtime-stats", "get"),
        ("/api/public/v1/servers/{server_id}/settings/drift", "get"),
    ],
)
def test_the_schema_documents_503_node_unavailable_where_the_node_is_asked(db, path, method):
    document = Client().get("/api/public/v1/schema/?format=json").json()
    response = document["paths"][path][method]["responses"]["503"]
    assert "Retry-After" in response["headers"]
    schema = response["content"]["application/json"]["schema"]["allOf"][1]
    assert schema["properties"]["error"]["properties"]["code"]["enum"] == ["node_unavailable"]


def test_the_schema_documents_no_503_for_metrics_which_never_ask_the_node(db):
    document = Client().get("/api/public/v1/schema/?format=json").json()
    responses = document["paths"]["/api/public/v1/servers/{server_id}/metrics"]["get"]["responses"]
    assert "503" not in responses


def test_readings_another_node_reports_of_a_server_are_never_shown(
    key, demo_server, stand_in_agent, put_in_state
):
    put_in_state(demo_server, "running")
    _other, token = register("other")
    heartbeat_with_reading(demo_server, token)
    body = api_get(key, demo_server, "realtime-stats").json()
    assert (body["cpu_percent"], body["players_online"]) == (0, 0)


def test_a_malformed_reading_is_not_shown(key, demo_server, put_in_state, node_token):
    put_in_state(demo_server, "running")
    body = {
        "agent_version": "1", "outbox_id": "box-1", "servers": {},
        "readings": {demo_server.id: {**READING, "cpu_percent": "lots"}},
    }  # fmt: skip
    headers = {"HTTP_AUTHORIZATION": f"Bearer {node_token}"}
    Client().post(
        "/internal/nodes/heartbeat", json.dumps(body), content_type="application/json", **headers
    )
    assert api_get(key, demo_server, "realtime-stats").json()["cpu_percent"] == 0


def test_a_start_reads_the_nodes_last_heartbeat_now(key, demo_server, agent_node, stand_in_agent):
    stale = Server.objects.select_related("node").get(id=demo_server.id)
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=None)
    stale.node.last_heartbeat_at = None
    beat(agent_node)  # the heartbeat came after the server (and its node) were read
    server_power(server=stale, action=PowerAction.START, actor=Actor.system("t"))
    assert state_of(demo_server) == "starting"


def test_a_start_carries_the_servers_plan_for_its_sandbox(key, demo_server, stand_in_agent):
    Server.objects.filter(id=demo_server.id).update(
        memory_mb=512, disk_mb=2048, cpu_percent=50, processes=64
    )

    api_post(key, demo_server, "power", {"action": "start"})

    (call,) = stand_in_agent.calls("POST")
    plan = {name: call.body[name] for name in ("memory_mb", "disk_mb", "cpu_percent", "processes")}
    assert plan == {"memory_mb": 512, "disk_mb": 2048, "cpu_percent": 50, "processes": 64}
