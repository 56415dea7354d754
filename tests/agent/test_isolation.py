"""A game never runs as root, and cannot read the agent's data or another server's directory."""

from __future__ import annotations

import json
import stat

import pytest

from gshost_agent.identities import in_range

# Out of reach: not allowed, or (in its sandbox) not there at all.
REFUSED = "(PermissionError|FileNotFoundError)"


@pytest.fixture
def agent(module_agent):
    return module_agent


@pytest.fixture(scope="module")
def snoops(module_agent, module_control_plane):
    """Two servers whose game tries to read what the console names: every test only looks."""
    first, _ = module_agent.start_server("snoop")
    second, _ = module_agent.start_server("snoop")
    module_control_plane.wait_for_report(first, "ready")
    module_control_plane.wait_for_report(second, "ready")
    return first, second


def identity_of(agent, server_id):
    return json.loads(agent.wait_for_console(server_id, r"^\{"))


def test_it_runs_the_game_as_its_servers_own_user_and_group_only(agent, snoops):
    first, second = snoops
    one, two = identity_of(agent, first), identity_of(agent, second)
    assert one["uid"] == one["euid"] == one["gid"] != 0 and in_range(one["uid"])
    assert one["groups"] == [one["gid"]]
    assert two["uid"] != one["uid"] and two["gid"] != one["gid"]


def test_it_gives_the_game_only_the_templates_environment(agent, snoops):
    first, _ = snoops
    assert "AGENT_TOKEN" not in identity_of(agent, first)["env"]
    assert not [name for name in identity_of(agent, first)["env"] if name.startswith("AGENT_")]


def test_it_keeps_the_game_out_of_another_servers_directory(agent, snoops):
    first, second = snoops
    other = agent.data_dir / "servers" / second
    agent.console(first, str(other))
    agent.wait_for_console(first, rf"^refused {other}: {REFUSED}$")
    agent.console(first, str(other / "server.properties"))
    agent.wait_for_console(first, rf"^refused {other}/server.properties: {REFUSED}$")


def test_it_lets_the_game_read_its_own_directory(agent, snoops):
    first, _ = snoops
    agent.console(first, "/server")  # its directory, inside its sandbox
    agent.wait_for_console(first, r"^readable /server$")


@pytest.mark.parametrize("name", ["run", "outbox", "samples", "servers"])
def test_it_keeps_the_game_out_of_the_agents_data(agent, snoops, name):
    first, _ = snoops
    path = agent.data_dir / name
    agent.console(first, str(path))
    agent.wait_for_console(first, rf"^refused {path}: {REFUSED}$")


def test_it_keeps_the_game_away_from_its_keepers_socket(agent, snoops):
    first, _ = snoops
    socket_path = agent.run_dir(first) / "keeper.sock"
    agent.console(first, str(socket_path))
    agent.wait_for_console(first, rf"^refused {socket_path}: {REFUSED}$")


def test_it_makes_the_server_directory_the_servers_group_only(agent, snoops):
    first, _ = snoops
    mode = (agent.data_dir / "servers" / first).stat()
    assert stat.S_IMODE(mode.st_mode) == 0o770 and mode.st_uid == 0
    assert stat.S_IMODE((agent.data_dir / "run").stat().st_mode) == 0o700


def test_it_keeps_the_agents_environment_and_its_token_from_the_game(agent, snoops):
    first, _ = snoops
    environ = f"/proc/{agent.process.pid}/environ"
    agent.console(first, environ)
    agent.wait_for_console(first, rf"^refused {environ}: {REFUSED}$")
