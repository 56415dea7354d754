"""The plan's memory limit, enforced by the kernel."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.agent.conftest import wait_for_exit

CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")


def test_it_kills_a_game_that_takes_more_memory_than_its_limit(agent, control_plane):
    server_id, _ = agent.start_server("hog", memory_mb=64)
    control_plane.wait_for_report(server_id, "ready")
    agent.console(server_id, "eat")
    report = control_plane.wait_for_report(server_id, "crashed")
    # A cgroup kills it (SIGKILL, and says so); RLIMIT_AS makes its allocation fail instead.
    assert report["signal"] == 9 or report["exit_code"] == 1


@pytest.mark.skipif(not CGROUP_MEMORY.is_dir(), reason="no cgroup v1 memory controller")
def test_it_says_oom_when_the_cgroup_killed_it(agent, control_plane):
    server_id, _ = agent.start_server("hog", memory_mb=64)
    control_plane.wait_for_report(server_id, "ready")
    limit = CGROUP_MEMORY / "gshost" / server_id / "memory.limit_in_bytes"
    assert int(limit.read_text()) == 64 << 20
    agent.console(server_id, "eat")
    report = control_plane.wait_for_report(server_id, "crashed")
    assert report["oom"] is True and report["signal"] == 9


@pytest.mark.skipif(not CGROUP_MEMORY.is_dir(), reason="no cgroup v1 memory controller")
def test_it_leaves_nothing_of_a_game_behind_even_outside_its_process_group(agent, control_plane):
    server_id, _ = agent.start_server("escaper")
    control_plane.wait_for_report(server_id, "ready")
    agent.wait_for_console(server_id, r"^child \d+$")
    game = agent.game_process(server_id)
    # Its child left its session: it is in the game's process tree still (the pid it printed
    # is its own namespace's), and the tree is all the agent's to end.
    escaped = [child for child in game.children() if child.pid != game.pid]
    assert escaped and all(os.getpgid(c.pid) != os.getpgid(game.pid) for c in escaped)
    agent.request("POST", f"/v1/servers/{server_id}/kill")
    control_plane.wait_for_report(server_id, "crashed")
    for child in escaped:
        wait_for_exit(child.pid)
