"""An agent that is not root (a developer's machine): its games run as its own user, with the
memory limit as an address-space limit (RLIMIT_AS)."""

from __future__ import annotations

import json
import os
import sysconfig
from pathlib import Path

import pytest

from tests.agent.conftest import ROOT
from tests.agent.lines import wait_until

NOBODY = 65534
SYSTEM_PYTHON = Path("/usr/bin/python3")


def agent_as_nobody(make_agent, certificates, *, allow_unsandboxed: bool):
    if not SYSTEM_PYTHON.exists() or os.geteuid() != 0:
        pytest.skip("needs root to become nobody, and a Python nobody can run")
    agent = make_agent()
    os.chown(agent.data_dir, NOBODY, NOBODY)
    # nobody reads its certificate and key, and the agent's dependencies from this venv.
    os.chmod(certificates["key"].parent, 0o755)
    for path in certificates.values():
        os.chmod(path, 0o644)
    site_packages = sysconfig.get_paths()["purelib"]
    agent.env["PYTHONPATH"] = f"{ROOT}:{site_packages}"
    if allow_unsandboxed:  # it cannot sandbox: a developer's machine
        agent.env["AGENT_ALLOW_UNSANDBOXED"] = "true"
    agent.start(python=str(SYSTEM_PYTHON), user=NOBODY)
    return agent


@pytest.fixture
def unprivileged_agent(make_agent, certificates):
    return agent_as_nobody(make_agent, certificates, allow_unsandboxed=True)


def test_it_refuses_to_start_games_it_cannot_sandbox(make_agent, certificates, control_plane):
    agent = agent_as_nobody(make_agent, certificates, allow_unsandboxed=False)
    said = "isolation: unsandboxed: the agent does not run as root; games will not be started"
    assert any(line.endswith(said) for line in agent.output.seen)  # at its start
    body = {"game": "demo", "port": 27015, "memory_mb": 256}
    answer = agent.request("POST", "/v1/servers/srv_" + "u" * 20 + "/start", body)
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "sandbox_unavailable"
    beat = wait_until(lambda: control_plane.heartbeats[-1] if control_plane.heartbeats else None)
    assert beat["isolation"] == "unsandboxed: the agent does not run as root"


def test_it_says_when_it_runs_games_unsandboxed(unprivileged_agent, control_plane):
    beat = wait_until(lambda: control_plane.heartbeats[-1] if control_plane.heartbeats else None)
    assert beat["isolation"] == (
        "unsandboxed (allowed by AGENT_ALLOW_UNSANDBOXED): the agent does not run as root"
    )


def test_it_runs_the_game_as_its_own_user(unprivileged_agent, control_plane):
    server_id, _ = unprivileged_agent.start_server("snoop")
    control_plane.wait_for_report(server_id, "ready")
    identity = json.loads(unprivileged_agent.wait_for_console(server_id, r"^\{"))
    assert identity["uid"] == NOBODY
    server_dir = unprivileged_agent.data_dir / "servers" / server_id
    assert server_dir.stat().st_uid == NOBODY and server_dir.stat().st_mode & 0o077 == 0


def test_it_limits_the_games_address_space(unprivileged_agent, control_plane):
    server_id, _ = unprivileged_agent.start_server("hog", memory_mb=128)
    control_plane.wait_for_report(server_id, "ready")
    unprivileged_agent.console(server_id, "eat")
    report = control_plane.wait_for_report(server_id, "crashed")
    assert report["exit_code"] == 1 and report["oom"] is False
    assert "MemoryError" in report["last_output"][-1]
