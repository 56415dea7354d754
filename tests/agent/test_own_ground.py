"""The agent's own ground: it refuses a data directory, or a directory inside it, that another
user owns or others may write (exit 2, naming the path).

The red team's reproduction: `make run` used a predictable /tmp path as the agent's data
directory; as `nobody`, they made it first, and at the next start their spec.json ran a
command as root."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.agent.test_cli import run_with

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to be someone else")


@pytest.fixture
def agent(make_agent):
    return make_agent()


def refused(agent, path: Path) -> None:
    result = run_with(agent.env)
    assert result.returncode == 2, result.stderr
    assert str(path) in result.stderr and "the agent uses only directories of its own" in (
        result.stderr
    )


def test_it_refuses_a_data_directory_another_user_made_first(agent, tmp_path):
    planted = agent.data_dir / "run" / ("srv_" + "n" * 20)
    planted.mkdir(parents=True)
    marker = tmp_path / "ran-as-root"
    spec = {"argv": ["/usr/bin/touch", str(marker)], "env": {}, "cwd": "/", "memory_mb": 64}
    (planted / "spec.json").write_text(json.dumps(spec))
    for path in (agent.data_dir, agent.data_dir / "run", planted):
        os.chown(path, NOBODY, NOBODY)
    refused(agent, agent.data_dir)
    assert not marker.exists()


def test_it_refuses_a_data_directory_others_may_write(agent):
    os.chmod(agent.data_dir, 0o777)
    refused(agent, agent.data_dir)


@pytest.mark.parametrize("name", ["run", "outbox", "backups"])
def test_it_refuses_a_directory_of_its_own_that_another_user_owns(agent, name):
    (agent.data_dir / name).mkdir()
    os.chown(agent.data_dir / name, NOBODY, NOBODY)
    refused(agent, agent.data_dir / name)


def test_it_refuses_a_servers_run_directory_another_user_owns(agent):
    planted = agent.data_dir / "run" / ("srv_" + "m" * 20)
    planted.mkdir(parents=True)
    os.chown(planted, NOBODY, NOBODY)
    refused(agent, planted)


def test_it_refuses_a_link_in_place_of_a_directory(agent, tmp_path):
    (agent.data_dir / "outbox").symlink_to(tmp_path)
    refused(agent, agent.data_dir / "outbox")
