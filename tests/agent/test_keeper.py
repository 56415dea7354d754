"""The keeper on its own: what it records when the game cannot start, and the memory limit
without a cgroup (RLIMIT_AS)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.conftest import ROOT

NOBODY = 65534


@pytest.fixture
def run_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="gshost-keeper-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def keep(
    run_dir: Path, argv: list[str], memory_mb: int = 1024, cgroup: str = "", gid: int = NOBODY
) -> dict:
    spec = {
        "argv": argv,
        "env": {},
        "cwd": "/tmp",
        "uid": NOBODY,
        "gid": gid,
        "memory_mb": memory_mb,
        "cgroup": cgroup,  # none: RLIMIT_AS
    }
    (run_dir / "spec.json").write_text(json.dumps(spec))
    subprocess.run(
        [sys.executable, "-m", "gshost_agent.keeper", str(run_dir)],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"]},
        timeout=60,
        check=False,
    )
    return json.loads((run_dir / "exit.json").read_text())


def test_it_records_an_exit_for_a_game_it_cannot_start(run_dir):
    record = keep(run_dir, ["/nonexistent/game"])
    assert record["exit_code"] == 127 and record["pid"] is None
    assert "cannot start the game" in record["last_output"][0]


def test_it_limits_the_address_space_without_a_cgroup(run_dir):
    hog = "heap = []\nwhile True: heap.append(bytearray(1 << 20))"
    record = keep(run_dir, ["/usr/bin/python3", "-c", hog], memory_mb=128)
    assert record["exit_code"] == 1 and record["oom"] is False
    assert "MemoryError" in record["last_output"][-1]


def test_it_runs_the_game_as_the_user_it_is_given(run_dir):
    record = keep(
        run_dir, ["/usr/bin/python3", "-c", "import os; print(os.getuid(), os.getgroups())"]
    )
    assert record["last_output"] == [f"{NOBODY} [{NOBODY}]"]


def test_it_falls_back_to_rlimit_as_when_it_cannot_make_the_cgroup(run_dir):
    hog = "heap = []\nwhile True: heap.append(bytearray(1 << 20))"
    argv = ["/usr/bin/python3", "-c", hog]
    record = keep(run_dir, argv, memory_mb=128, cgroup="/proc/no-cgroup-here/srv_x")
    assert record["exit_code"] == 1
    assert "MemoryError" in record["last_output"][-1]


def test_it_records_an_exit_when_it_cannot_become_the_game_user(run_dir):
    record = keep(run_dir, ["/usr/bin/python3", "-c", "print(1)"], gid=2**40)
    assert record["exit_code"] == 127
    assert "cannot start the game" in record["last_output"][0]
