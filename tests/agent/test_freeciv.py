"""Debian's freeciv-server run by a real agent: ready, its players, its console, its settings,
`quit` and a crash. The Makefile's test targets install it (scripts/ensure-freeciv.sh); without
it, and with no way to install it, the module is skipped."""

from __future__ import annotations

import os
import re
import resource
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from gshost_agent.identities import in_range
from tests.agent.conftest import new_server_id, wait_for_exit
from tests.agent.lines import LineReader, wait_until
from tests.ports import free_port

FREECIV = Path("/usr/games/freeciv-server")
ROOT = Path(__file__).resolve().parents[2]


def _installed() -> bool:
    if not FREECIV.exists():
        subprocess.run(
            [ROOT / "scripts" / "ensure-freeciv.sh"], check=False, capture_output=True, timeout=600
        )
    return FREECIV.exists()


if not _installed():
    pytest.skip(
        "Debian's freeciv-server is not installed and cannot be (scripts/ensure-freeciv.sh)",
        allow_module_level=True,
    )

# freeciv's network capability, which a client must share (`+Freeciv-3.0-network ...`).
CAPABILITY = re.search(rb"\+Freeciv-[0-9.]+-network[^\0]*", FREECIV.read_bytes())


def connect(port: int, name: str) -> socket.socket:
    """A freeciv client as far as its login: its join request (packet 4, no delta: a 2-byte
    length and a 1-byte type, then the user name, the capability and the version label as
    NUL-terminated strings, then the version as three 32-bit integers)."""
    assert CAPABILITY is not None
    client = socket.create_connection(("127.0.0.1", port), timeout=10)
    body = name.encode() + b"\0" + CAPABILITY[0] + b"\0" + b"\0" + struct.pack(">III", 3, 0, 0)
    client.sendall(struct.pack(">HB", len(body) + 3, 4) + body)
    assert client.recv(4096)  # its join reply (compressed), and more
    return client


# Below the 6 AI players the ruleset would fill in: freeciv takes it once `aifill 0` came first.
SETTINGS = {"maxplayers": 4, "timeout": 30}


@pytest.fixture
def freeciv(module_agent, module_control_plane):
    """A freeciv server that runs, under the default memory limit (1024 MB)."""
    server_id, port = module_agent.start_server("freeciv", memory_mb=1024, settings=SETTINGS)
    module_control_plane.wait_for_report(server_id, "ready", timeout=30)
    return server_id, port


def players_of(agent, server_id):
    return agent.request("GET", f"/v1/servers/{server_id}/players").json()


def console_lines(agent, server_id):
    """All its console lines (the agent gives 200 at a time; freeciv says ~100 as it starts)."""
    lines: list[str] = []
    after = 0
    while True:
        route = f"/v1/servers/{server_id}/console?after={after}"
        page = agent.request("GET", route).json()["lines"]
        if not page:
            return lines
        lines += [line["text"] for line in page]
        after = page[-1]["n"]


def wait_for_line(agent, server_id, pattern, timeout=10.0):
    def found():
        return next((t for t in console_lines(agent, server_id) if re.search(pattern, t)), None)

    return wait_until(found, timeout, interval=0.1)


def test_it_reports_ready_when_freeciv_accepts_connections(module_agent, freeciv):
    server_id, port = freeciv
    assert module_agent.state_of(server_id) == "running"
    lines = console_lines(module_agent, server_id)
    assert f"2: Now accepting new client connections on port {port}." in lines
    # It read its settings file at start.
    assert "Console: 'maxplayers' has been set to 4." in lines
    assert "Console: 'aifill' has been set to 0." in lines


def test_it_lists_no_players_then_the_players_created_on_the_console(module_agent, freeciv):
    server_id, _ = freeciv
    asked = time.monotonic()
    assert players_of(module_agent, server_id) == {"count": 0, "max": 4, "players": []}
    assert "<no players>" in console_lines(module_agent, server_id)

    assert module_agent.console(server_id, "create Alice").status_code == 200
    assert module_agent.console(server_id, "create 'Dan Eve'").status_code == 200
    wait_for_line(module_agent, server_id, "^Dan Eve has been added as an AI-controlled")
    # Within 5 s of the last answer: the lines that said so keep the list.
    answer = players_of(module_agent, server_id)
    assert [p["name"] for p in answer["players"]] == ["Alice", "Dan Eve"]
    assert answer["count"] == 2 and answer["max"] == 4
    assert all(p["joined_at"].endswith("Z") for p in answer["players"])

    # Later, freeciv's own list says it (its rows, a name with a space).
    time.sleep(max(0.0, 5.2 - (time.monotonic() - asked)))
    answer = players_of(module_agent, server_id)
    assert [p["name"] for p in answer["players"]] == ["Alice", "Dan Eve"]
    assert console_lines(module_agent, server_id).count("List of players:") == 2
    assert "Dan Eve [#ffff00]: Team 2, user Unassigned" in console_lines(module_agent, server_id)


def test_a_client_who_connects_is_a_player_until_it_leaves(module_agent, freeciv):
    server_id, port = freeciv
    with connect(port, "Bob"):
        wait_for_line(module_agent, server_id, "^2: Bob has connected from ")
        answer = players_of(module_agent, server_id)  # freeciv's own list
        assert [p["name"] for p in answer["players"]] == ["Bob"]
        wait_for_line(module_agent, server_id, "^Bob .*: Team 1, user Bob")
    wait_for_line(module_agent, server_id, "^2: Removing player Bob.$")
    assert players_of(module_agent, server_id)["players"] == []


def test_a_game_begins_with_a_client_and_saves_in_its_directory(module_agent, freeciv):
    server_id, port = freeciv
    with connect(port, "Bob"):
        wait_for_line(module_agent, server_id, "^2: Bob has connected from ")
        module_agent.console(server_id, "create Alice")
        module_agent.console(server_id, "start")
        wait_for_line(module_agent, server_id, "^Starting game.$")
        saved = wait_for_line(module_agent, server_id, "^Game saved as saves/", timeout=20)
        # Bob's player now has its leader's name (`2: Rama Thibodi rules the Thai.`).
        answer = players_of(module_agent, server_id)
        assert answer["count"] == 2 and "Alice" in [p["name"] for p in answer["players"]]
    save = module_agent.data_dir / "servers" / server_id / saved.removeprefix("Game saved as ")
    assert save.is_file() and save.stat().st_uid != 0


def test_after_a_game_is_over_it_waits_for_the_next_one(
    module_agent, module_control_plane, freeciv
):
    server_id, port = freeciv
    with connect(port, "Bob"):
        wait_for_line(module_agent, server_id, "^2: Bob has connected from ")
        for command in ["create Alice", "set endturn 1", "set timeout 1", "start"]:
            module_agent.console(server_id, command)
        wait_for_line(module_agent, server_id, r"^Game saved as saves/.*-final\.sav", 20)
    # The last client gone, it starts afresh: its settings file again, its ready line again.
    ready = "2: Now accepting new client connections on port"
    wait_until(lambda: "".join(console_lines(module_agent, server_id)).count(ready) == 2, 20)
    assert module_agent.state_of(server_id) == "running"
    assert [r["kind"] for r in module_control_plane.reports_of(server_id)] == ["ready"]


def test_it_sends_a_console_command_and_shows_freeciv_s_answer(module_agent, freeciv):
    server_id, _ = freeciv
    assert module_agent.console(server_id, "show maxplayers").json() == {"accepted": True}

    def answer():
        lines = console_lines(module_agent, server_id)
        if "> show maxplayers" in lines:
            after = lines[lines.index("> show maxplayers") :]
            return next((t for t in after if t.startswith("maxplayers ")), None)
        return None

    assert re.fullmatch(r"maxplayers\s+\+\s+4 \(1, 150\)", wait_until(answer))


def test_it_writes_its_settings_file_and_reads_it_back(module_agent, freeciv):
    server_id, _ = freeciv
    answer = module_agent.request("GET", f"/v1/servers/{server_id}/settings").json()
    assert answer == {"settings": {"aifill": "0", "maxplayers": "4", "timeout": "30"}}
    on_disk = module_agent.data_dir / "servers" / server_id / "server.serv"
    assert on_disk.read_text() == "set aifill 0\nset maxplayers 4\nset timeout 30\n"


def test_quit_stops_it_and_reports_halted(module_agent, module_control_plane, freeciv):
    server_id, _ = freeciv
    pid = module_agent.game_pid(server_id)
    assert module_agent.console(server_id, "quit").status_code == 200
    report = module_control_plane.wait_for_report(server_id, "halted", timeout=30)
    assert report["exit_code"] == 0 and report["signal"] is None and report["oom"] is False
    assert "Goodbye." in report["last_output"]
    wait_for_exit(pid)
    wait_until(lambda: module_agent.state_of(server_id) == "stopped")
    assert not [r for r in module_control_plane.reports_of(server_id) if r["kind"] == "crashed"]


def test_stop_sends_quit_and_reports_halted(module_agent, module_control_plane, freeciv):
    server_id, _ = freeciv
    assert module_agent.request("POST", f"/v1/servers/{server_id}/stop").status_code == 202
    report = module_control_plane.wait_for_report(server_id, "halted", timeout=30)
    assert report["exit_code"] == 0 and "> quit" in report["last_output"]


def test_a_restart_starts_it_again_with_new_settings(module_agent, module_control_plane, freeciv):
    server_id, port = freeciv
    body = {"game": "freeciv", "port": port, "memory_mb": 1024, "settings": {"maxplayers": 12}}
    answer = module_agent.request("POST", f"/v1/servers/{server_id}/restart", body)
    assert answer.status_code == 202
    wait_for_line(module_agent, server_id, "^Console: 'maxplayers' has been set to 12.$", 30)
    wait_until(lambda: len(module_control_plane.reports_of(server_id)) == 2, timeout=30)
    assert [r["kind"] for r in module_control_plane.reports_of(server_id)] == ["ready", "ready"]
    assert players_of(module_agent, server_id)["max"] == 12


def test_a_port_another_server_has_is_refused(module_agent, module_control_plane, freeciv):
    _, port = freeciv
    body = {"game": "freeciv", "port": port, "memory_mb": 256, "settings": {}}
    answer = module_agent.request("POST", f"/v1/servers/{new_server_id()}/start", body)
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "port_in_use"


def test_a_kill_is_a_crash_by_signal_9(module_agent, module_control_plane, freeciv):
    server_id, _ = freeciv
    assert module_agent.request("POST", f"/v1/servers/{server_id}/kill").status_code == 202
    report = module_control_plane.wait_for_report(server_id, "crashed")
    assert report["signal"] == 9 and report["exit_code"] is None and report["oom"] is False
    wait_until(lambda: module_agent.state_of(server_id) == "stopped")


def test_it_runs_as_its_servers_own_user_and_keeps_its_files_in_its_directory(
    module_agent, freeciv
):
    server_id, _ = freeciv
    game = module_agent.game_process(server_id)
    assert game.uids().real != 0 and in_range(game.uids().real)
    directory = module_agent.data_dir / "servers" / server_id
    assert game.cwd() == "/server"  # its directory, where its sandbox has it
    # HOME is its own directory: its console history goes there.
    module_agent.console(server_id, "quit")
    wait_for_exit(game.pid)
    assert (directory / ".freeciv").is_dir()


def test_it_starts_under_an_address_space_limit_of_1024_mb():
    """Where the node has no memory cgroup, the agent's limit is RLIMIT_AS (the default 1024 MB).
    (As root freeciv-server refuses to run: `Fatal error: you're trying to run me as
    superuser!`.)"""
    directory = Path(tempfile.mkdtemp(prefix="gshost-freeciv-", dir="/tmp"))
    os.chmod(directory, 0o777)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1024 << 20, 1024 << 20))

    command = [FREECIV, "--port", str(free_port()), "--saves", "saves", "--Announce", "none"]
    game = subprocess.Popen(
        command,
        cwd=directory,
        env={"LANG": "C.UTF-8", "HOME": str(directory)},
        user="nobody",
        group="nogroup",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=limited,
        start_new_session=True,
    )
    assert game.stdin is not None and game.stdout is not None
    try:
        LineReader(game.stdout).wait_for("Now accepting new client connections", timeout=30)
        game.stdin.write("quit\n")
        game.stdin.flush()
        assert game.wait(timeout=15) == 0
    finally:
        game.kill()
        game.wait()
        shutil.rmtree(directory, ignore_errors=True)


def test_save_to_tmp_writes_into_its_sandbox_and_nothing_outside(module_agent, freeciv):
    server_id, _ = freeciv
    name = f"gshost-freeciv-probe-{server_id}"
    assert module_agent.console(server_id, f"save /tmp/{name}").status_code == 200
    wait_for_line(module_agent, server_id, f"^Game saved as /tmp/{name}", timeout=20)
    assert list(Path("/tmp").glob(f"{name}*")) == []
