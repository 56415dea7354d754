"""The console, the players and the readings of a real game process."""

from __future__ import annotations

import json
import socket
import time

import pytest

from gshost_agent.protocol import format_time
from tests.agent.conftest import new_server_id
from tests.agent.lines import wait_until


@pytest.fixture
def running(agent, control_plane):
    server_id, port = agent.start_server(settings={"max-players": 5, "motd": "Hello"})
    control_plane.wait_for_report(server_id, "ready")
    return server_id, port


def join(port: int, name: str) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=10)
    client.sendall(f"JOIN {name}\n".encode())
    assert client.makefile().readline().strip() == f"WELCOME {name}"
    return client


def test_it_writes_a_console_command_to_the_game(agent, running):
    server_id, _ = running
    answer = agent.console(server_id, "say hello from the panel")
    assert answer.status_code == 200 and answer.json() == {"accepted": True}
    agent.wait_for_console(server_id, r"^\[say\] hello from the panel$")


def test_it_numbers_console_lines_and_gives_those_after_n(agent, running):
    server_id, _ = running
    first = agent.request("GET", f"/v1/servers/{server_id}/console").json()
    assert first["lines"][0] == {"n": 1, "text": first["lines"][0]["text"]}
    agent.console(server_id, "say later")
    agent.wait_for_console(server_id, r"^\[say\] later$")
    later = agent.request("GET", f"/v1/servers/{server_id}/console?after={first['last']}").json()
    assert [line["text"] for line in later["lines"]] == ["[say] later"]


def test_it_refuses_a_command_with_control_characters(agent, running):
    server_id, _ = running
    answer = agent.console(server_id, "say a\nstop")
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_request"


def test_it_refuses_a_command_over_1000_characters(agent, running):
    server_id, _ = running
    assert agent.console(server_id, "say " + "x" * 1000).status_code == 400


def test_it_refuses_a_console_command_for_a_server_that_does_not_run(agent):
    assert agent.console("srv_0000000000000000none", "list").status_code == 409


def test_it_lists_the_players_the_game_answers_with(agent, running):
    server_id, port = running
    with join(port, "alice"), join(port, "bob"):
        agent.wait_for_console(server_id, "^bob joined$")
        answer = agent.request("GET", f"/v1/servers/{server_id}/players").json()
        assert answer["count"] == 2 and answer["max"] == 5
        assert [p["name"] for p in answer["players"]] == ["alice", "bob"]
        assert all(p["joined_at"].endswith("Z") for p in answer["players"])


def test_it_forgets_a_player_who_left(agent, running):
    server_id, port = running
    join(port, "alice").close()
    agent.wait_for_console(server_id, "^alice left$")
    answer = agent.request("GET", f"/v1/servers/{server_id}/players").json()
    assert answer == {"count": 0, "max": 5, "players": []}


def test_it_reads_the_settings_file_as_it_is_on_disk(agent, running):
    server_id, _ = running
    settings = agent.request("GET", f"/v1/servers/{server_id}/settings").json()["settings"]
    assert settings == {"motd": "Hello", "max-players": "5", "difficulty": "normal"}


def test_it_refuses_an_unknown_setting(agent):
    body = {"game": "demo", "port": 27999, "memory_mb": 256, "settings": {"op": "me"}}
    answer = agent.request("POST", "/v1/servers/srv_0000000000000000sett/start", body)
    assert answer.status_code == 400


def test_it_reads_the_real_process(agent, running):
    server_id, port = running
    with join(port, "alice"):
        agent.wait_for_console(server_id, "^alice joined$")
        stats = agent.request("GET", f"/v1/servers/{server_id}/stats").json()
    assert stats["state"] == "running"
    assert 5 < stats["memory_mb"] < 256 and stats["memory_limit_mb"] == 256
    assert stats["cpu_percent"] >= 0 and stats["disk_mb"] >= 0
    assert stats["players_online"] == 1
    assert stats["network_in_kbps"] is None and stats["network_out_kbps"] is None
    assert stats["uptime_seconds"] >= 0


def test_it_answers_metrics_from_its_samples(agent, running):
    server_id, _ = running
    samples_file = agent.data_dir / "samples" / f"{server_id}.jsonl"
    wait_until(lambda: samples_file.exists() and samples_file.read_text(), timeout=15)
    answer = agent.request("GET", f"/v1/servers/{server_id}/metrics?step=10").json()
    sample = answer["samples"][0]  # one, or two when the 10-second sampling came meanwhile
    assert sample["memory_mb"] > 5 and sample["players_online"] == 0
    assert sample["at"].endswith("Z")


def minutes_carried(heartbeat, server_id):
    return heartbeat["readings"].get(server_id, {}).get("minutes", [])


def test_its_heartbeat_carries_a_completed_minute_until_it_is_answered_200(agent, control_plane):
    server_id = new_server_id()
    minute = (time.time() // 60 - 3) * 60  # three minutes ago, with samples of an earlier run
    earlier = [{"at": minute + s, "cpu_percent": 2.0, "memory_mb": 50.0, "players_online": 1}
               for s in (0, 10, 20)]  # fmt: skip
    samples_file = agent.data_dir / "samples" / f"{server_id}.jsonl"
    samples_file.write_text("".join(json.dumps(sample) + "\n" for sample in earlier))
    expected = {"at": format_time(minute), "cpu_percent": 2.0, "memory_mb": 50.0,
                "players_online": 1}  # fmt: skip
    agent.start_server(server_id=server_id)

    def carrying_it() -> list[int]:
        with control_plane.lock:
            beats = list(control_plane.heartbeats)
        return [n for n, beat in enumerate(beats) if expected in minutes_carried(beat, server_id)]

    (first,) = wait_until(carrying_it, timeout=25)
    wait_until(lambda: len(control_plane.heartbeats) > first + 1, timeout=25)
    assert carrying_it() == [first]  # answered 200: the next heartbeat does not carry it again
