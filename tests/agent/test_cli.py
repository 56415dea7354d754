"""`gshost-agent`: its configuration, and how it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.agent.conftest import ROOT
from tests.agent.lines import wait_until


def run_with(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gshost_agent"],
        env={"PATH": os.environ["PATH"], **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.fixture
def agent_env(make_agent):
    return dict(make_agent().env)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("AGENT_TOKEN", None),
        ("AGENT_CONTROL_URL", None),
        ("AGENT_CONTROL_URL", "ftp://example.com"),
        ("AGENT_CONTROL_URL", "http://example.com"),
        ("AGENT_TLS_CERT", None),
        ("AGENT_TLS_KEY", "/nonexistent/key.pem"),
        ("AGENT_BIND", "8444"),
        ("AGENT_DATA_DIR", "relative/dir"),
        ("AGENT_GAME_USER", "bad user"),
        ("AGENT_CONTROL_CA", "/nonexistent/ca.pem"),
    ],
)
def test_it_refuses_to_start_with_a_missing_or_malformed_setting(agent_env, setting, value):
    env = {k: v for k, v in agent_env.items() if k != setting}
    if value is not None:
        env[setting] = value
    result = run_with(env)
    assert result.returncode != 0
    assert setting in result.stderr


def test_it_never_prints_its_token(agent_env):
    env = {**agent_env, "AGENT_BIND": "nonsense"}
    result = run_with(env)
    assert agent_env["AGENT_TOKEN"] not in result.stderr + result.stdout


def test_it_stops_every_game_on_exit_when_asked_to(make_agent, control_plane):
    agent = make_agent()
    agent.start("--stop-servers-on-exit")
    servers = [agent.start_server()[0], agent.start_server("stubborn")[0]]
    for server_id in servers:
        control_plane.wait_for_report(server_id, "ready")
    ending = time.monotonic()
    assert agent.end(signal.SIGINT) == 0
    assert time.monotonic() - ending < 10
    assert agent.leftovers() == []
    for server_id in servers:
        control_plane.wait_for_report(server_id, "stopped_by_node", timeout=1)


def test_it_ends_within_seconds_without_stopping_games(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    ending = time.monotonic()
    assert agent.end(signal.SIGTERM) == 0
    assert time.monotonic() - ending < 5
    wait_until(lambda: psutil.pid_exists(agent.game_pid(server_id)))


def test_it_refuses_a_data_directory_another_agent_uses(agent):
    result = run_with({**agent.env, "AGENT_BIND": "127.0.0.1:1"})
    assert result.returncode != 0
    assert "another agent" in result.stderr
