"""Every game in a sandbox: a hostile game (the tests' own template, `hostile`, which runs the
probe each console line names) attacks a real neighbour game on the same node, the agent and
the node itself, and each rule holds."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests

from tests.agent.conftest import Agent, ControlPlane
from tests.agent.lines import probe, wait_until
from tests.ports import free_port

CGROUP_V1 = Path("/sys/fs/cgroup")


@pytest.fixture(autouse=True)
def sandboxing_node(agent: Agent) -> None:
    if not agent.request("GET", "/v1/node").json()["isolation"].startswith("sandboxed"):
        pytest.skip("this machine cannot sandbox games (scripts/ensure-sandbox.sh)")


def hostile(agent: Agent, plane: ControlPlane, **plan: int) -> str:
    server_id, _ = agent.start_server("hostile", **plan)
    plane.wait_for_report(server_id, "ready")
    return server_id


def neighbour(agent: Agent, plane: ControlPlane, **overrides: object) -> tuple[str, int]:
    server_id, port = agent.start_server("demo", **overrides)
    plane.wait_for_report(server_id, "ready")
    return server_id, port


def join(port: int, name: str = "alice") -> str:
    """What a player on the node's loopback hears when joining the game at `port`."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as player:
        player.sendall(f"JOIN {name}\n".encode())
        return player.makefile().readline()


def node_address() -> str:
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith(
                ("127.", "100.72.")
            ):
                return str(address.address)
    pytest.skip("the node has no address besides loopback")


def test_the_node_reports_its_isolation_in_its_heartbeat(agent, control_plane):
    beat = wait_until(lambda: control_plane.heartbeats[-1] if control_plane.heartbeats else None)
    assert beat["isolation"].startswith("sandboxed")


def test_a_game_sees_only_its_own_processes(agent, control_plane):
    attacker = hostile(agent, control_plane)
    pids = probe(agent, attacker, "pids").split()
    assert len(pids) <= 3  # bubblewrap's init, the game, maybe a probe's child


def test_a_game_cannot_kill_its_neighbour_or_the_agent(agent, control_plane):
    victim, port = neighbour(agent, control_plane)
    attacker = hostile(agent, control_plane)
    for pid in (agent.game_process(victim).pid, agent.process.pid, agent.keeper_pid(victim)):
        assert probe(agent, attacker, f"kill {pid} 9") in (
            "failed ProcessLookupError",
            "failed PermissionError",
        )
    assert join(port) == "WELCOME alice\n"
    assert agent.state_of(victim) == "running"


def test_a_game_cannot_take_a_stopped_neighbours_port(agent, control_plane):
    victim, port = neighbour(agent, control_plane)
    agent.request("POST", f"/v1/servers/{victim}/stop")
    control_plane.wait_for_report(victim, "halted")
    attacker = hostile(agent, control_plane)
    assert probe(agent, attacker, f"bind {port}") == "bound"  # in its own network only
    with pytest.raises(OSError):
        join(port)  # players do not meet the attacker's banner
    agent.start_server("demo", server_id=victim, port=port)
    wait_until(lambda: len(control_plane.reports_of(victim)) == 3)
    assert [r["kind"] for r in control_plane.reports_of(victim)] == ["ready", "halted", "ready"]
    assert join(port, "bob") == "WELCOME bob\n"


def test_a_game_cannot_reach_a_listener_on_the_nodes_loopback(agent, control_plane):
    attacker = hostile(agent, control_plane)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        assert probe(agent, attacker, f"connect 127.0.0.1 {port}").startswith("failed")
    agent_port = agent.port  # the agent itself, on loopback too
    assert probe(agent, attacker, f"connect 127.0.0.1 {agent_port}").startswith("failed")


def test_a_game_cannot_reach_a_service_on_the_nodes_own_address(agent, control_plane):
    attacker = hostile(agent, control_plane)
    with socket.create_server(("0.0.0.0", 0)) as listener:
        port = listener.getsockname()[1]
        answer = probe(agent, attacker, f"connect {node_address()} {port}")
    assert answer.startswith("failed")


def test_players_reach_a_game_at_the_nodes_address(agent, control_plane):
    _, port = neighbour(agent, control_plane)
    with socket.create_connection((node_address(), port), timeout=5) as player:
        player.sendall(b"JOIN carol\n")
        assert player.makefile().readline() == "WELCOME carol\n"


def test_a_game_sees_neither_its_neighbours_tmp_nor_its_shm(agent, control_plane):
    first = hostile(agent, control_plane)
    second = hostile(agent, control_plane)
    assert probe(agent, first, "put /tmp/first-secret") == "written"
    assert probe(agent, first, "put /dev/shm/first-secret") == "written"
    assert "first-secret" not in probe(agent, second, "ls /tmp")
    assert "first-secret" not in probe(agent, second, "ls /dev/shm")
    assert not Path("/tmp/first-secret").exists() and not Path("/dev/shm/first-secret").exists()


def test_a_games_tmp_and_shm_are_empty_after_a_restart(agent, control_plane):
    server_id = hostile(agent, control_plane)
    probe(agent, server_id, "put /tmp/kept")
    probe(agent, server_id, "put /dev/shm/kept")
    body = {"game": "hostile", "port": free_port(), "memory_mb": 256}
    assert agent.request("POST", f"/v1/servers/{server_id}/restart", body).status_code == 202
    wait_until(lambda: len(control_plane.reports_of(server_id)) == 2)
    # (Only the way to its own directory, where the node keeps that under /tmp.)
    assert "kept" not in probe(agent, server_id, "ls /tmp").strip("[]").split(",")
    assert probe(agent, server_id, "ls /dev/shm") == "[]"


def test_shm_beyond_the_memory_limit_is_refused_or_kills_only_the_game(agent, control_plane):
    _, port = neighbour(agent, control_plane)
    attacker = hostile(agent, control_plane, memory_mb=64)
    agent.console(attacker, "fill /dev/shm/hoard 200")

    def outcome() -> str | None:
        crashes = [r for r in control_plane.reports_of(attacker) if r["kind"] == "crashed"]
        if crashes:
            assert crashes[0]["oom"] is True
            return "killed"
        lines = agent.request("GET", f"/v1/servers/{attacker}/console").json()["lines"]
        refused = [line for line in lines if line["text"] == "fill: failed OSError"]
        return "refused" if refused else None

    assert wait_until(outcome, timeout=30) in ("killed", "refused")
    assert join(port) == "WELCOME alice\n"


def test_a_fork_bomb_stops_at_the_plans_processes(agent, control_plane):
    _, port = neighbour(agent, control_plane)
    attacker = hostile(agent, control_plane, processes=20)
    assert probe(agent, attacker, "fork 200") == "failed BlockingIOError"
    forked = int(agent.wait_for_console(attacker, r"^forked \d+$").split()[1])
    assert forked < 20
    assert agent.state_of(attacker) == "running"
    assert probe(agent, attacker, "pids")  # the game itself still answers
    assert join(port) == "WELCOME alice\n"
    assert agent.request("GET", "/v1/node").status_code == 200


@pytest.mark.skipif(not (CGROUP_V1 / "cpu").is_dir(), reason="no cgroup v1 cpu controller")
def test_a_game_gets_at_most_its_cpu_share(agent, control_plane):
    attacker = hostile(agent, control_plane, cpu_percent=20)
    group = CGROUP_V1 / "cpu" / "gshost" / attacker
    assert int((group / "cpu.cfs_quota_us").read_text()) == 20_000
    assert int((group / "cpu.cfs_period_us").read_text()) == 100_000
    cpu_seconds = float(probe(agent, attacker, "spin 2"))
    assert cpu_seconds <= 2 * 0.2 * 1.5  # its share, with the kernel's rounding


@pytest.mark.skipif(not (CGROUP_V1 / "pids").is_dir(), reason="no cgroup v1 pids controller")
def test_the_plans_processes_and_memory_are_the_kernels_limits(agent, control_plane):
    attacker = hostile(agent, control_plane, processes=30, memory_mb=96)
    assert int((CGROUP_V1 / "pids" / "gshost" / attacker / "pids.max").read_text()) == 32
    memory = CGROUP_V1 / "memory" / "gshost" / attacker / "memory.limit_in_bytes"
    assert int(memory.read_text()) == 96 << 20


def test_a_game_runs_as_an_unprivileged_user_without_capabilities(agent, control_plane):
    attacker = hostile(agent, control_plane)
    game = agent.game_process(attacker)
    assert game.uids().real != 0 and game.uids().effective != 0
    status = Path(f"/proc/{game.pid}/status").read_text()
    assert re.search(r"^CapEff:\s+0+$", status, re.MULTILINE)
    assert re.search(r"^CapBnd:\s+0+$", status, re.MULTILINE)
    assert re.search(r"^NoNewPrivs:\s+1$", status, re.MULTILINE)


def test_a_game_writes_only_its_own_directory(agent, control_plane):
    attacker = hostile(agent, control_plane)
    own = agent.data_dir / "servers" / attacker
    assert probe(agent, attacker, "put /server/mine") == "written"  # its directory, inside
    assert (own / "mine").read_text() == "secret\n"
    for path in ("/etc/gshost-test", "/usr/gshost-test", f"{agent.data_dir}/outbox/x"):
        assert probe(agent, attacker, f"put {path}").startswith("failed")
        assert not Path(path).exists()


def test_a_port_the_node_itself_uses_is_refused(agent, control_plane):
    body = {"game": "demo", "port": agent.port, "memory_mb": 256}
    answer = agent.request("POST", "/v1/servers/srv_" + "p" * 20 + "/start", body)
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "port_in_use"


def test_its_network_is_removed_when_the_game_stops(agent, control_plane):
    server_id, port = neighbour(agent, control_plane)
    agent.request("POST", f"/v1/servers/{server_id}/stop")
    control_plane.wait_for_report(server_id, "halted")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/", timeout=3)
    with socket.create_server(("0.0.0.0", port)) as listener:
        assert listener.getsockname()[1] == port


def test_a_games_writes_past_its_disk_limit_fail_and_it_keeps_running(agent, control_plane):
    attacker = hostile(agent, control_plane, disk_mb=5)
    assert probe(agent, attacker, "fill /server/hoard.bin 12") == "failed OSError"
    assert probe(agent, attacker, "ls /server").startswith("[")  # it still answers
    assert agent.state_of(attacker) == "running"


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 100 MiB filesystem for an agent's data: a disk a game can fill. (A short path: a
    Unix socket's path has at most 107 bytes.)"""
    mount = Path(tempfile.mkdtemp(prefix="gshost-disk-", dir="/tmp"))
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=100m,mode=0711", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)
    mount.rmdir()


def test_a_full_disk_loses_no_neighbours_crash_report(make_agent, control_plane, small_disk):
    agent = make_agent(small_disk)
    agent.start()
    assert (small_disk / "reserve").stat().st_size == 16 << 20
    victim, _ = neighbour(agent, control_plane)
    attacker = hostile(agent, control_plane, memory_mb=512)
    # Its own filesystem (a sparse image of its 10 GB plan) takes the writes: the node's
    # 100 MiB fill up behind it once they are written back.
    probe(agent, attacker, "fill /server/hoard.bin 200", timeout=60)
    os.sync()
    assert shutil.disk_usage(small_disk).free < 1 << 20  # full
    assert agent.request("POST", f"/v1/servers/{victim}/kill").status_code == 202
    report = control_plane.wait_for_report(victim, "crashed")
    assert report["signal"] == 9
    assert agent.request("GET", "/v1/node").json()["servers"][victim] == "stopped"
