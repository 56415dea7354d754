"""`make run`'s script: the demo's servers run as real game processes on a local agent and
deliver signed webhooks to the local receiver (a game killed with SIGKILL arrives as
server.crashed), and Ctrl-C stops web, worker, receiver, agent and games within 10 s, leaving
no process behind.

The script runs as `make run` runs it: on its own SQLite file, with the django-q2 ORM broker.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.processes import command_line, descendants, process, processes

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "run-web-and-worker.sh"
STOP_DEADLINE_SECONDS = 10


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str]
    port: int

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(condition: Callable[[], bool], seconds: float, what: str, running: Running) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {seconds} s:\n{running.output()[-4000:]}")


def _web_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module", name="running")
def running_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    workdir = tmp_path_factory.mktemp("make-run")
    # The games' user must reach their directories: pytest's own temporary tree is private.
    agent_data = Path(tempfile.mkdtemp(prefix="gshost-make-run-test-", dir="/tmp"))
    agent_data.chmod(0o711)
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{workdir / 'db.sqlite3'}",
        "REDIS_URL": "",
        "DEBUG": "true",
        "DEMO": "1",
        "PORT": str(_free_port()),
        "RECEIVER_PORT": str(_free_port()),
        "AGENT_PORT": str(_free_port()),
        "AGENT_DATA_DIR": str(agent_data),
        "RUN_DIR": str(workdir / "run"),
        "SIMULATED_RUNTIME_DELAY_SECONDS": "0.5",
    }
    manage = [sys.executable, "manage.py", "migrate", "--noinput", "-v0"]
    subprocess.run(manage, cwd=ROOT, env=env, check=True, timeout=180)
    log = workdir / "run.log"
    with log.open("wb") as out:
        script = subprocess.Popen(
            [str(SCRIPT)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    running = Running(script, log, env, int(env["PORT"]))
    try:
        _wait_for(lambda: _web_answers(running.port), 60, "the web server answering", running)
        yield running
    finally:
        if script.poll() is None:  # a test failed before the script stopped
            _kill_everything_left(script)
        shutil.rmtree(agent_data, ignore_errors=True)


def _kill_everything_left(script: subprocess.Popen[bytes]) -> None:
    """After a failure: the script and the process group of each thing it started (each runs
    in a session of its own), so nothing outlives the test."""
    groups = {found.group for pid in descendants(script.pid) if (found := process(pid))}
    for group in {script.pid, *groups}:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    script.wait()


def _receiver_saw(running: Running, event: str, server: str) -> bool:
    return f"[receiver] {event} server='{server}'" in running.output()


def _delivered_payload(running: Running, event: str, server: str) -> dict[str, object]:
    lines = running.output().splitlines()
    index = next(
        i for i, line in enumerate(lines) if f"[receiver] {event} server='{server}'" in line
    )
    assert lines[index].endswith("signature verified")
    return dict(json.loads(lines[index + 1].removeprefix("[receiver]").strip()))


def _game_process(running: Running, server: str) -> int:
    """The pid of the server's demo game, found by the port the demo printed for it."""
    port = re.search(rf"{server} +demo +node local +127\.0\.0\.1:(\d+)", running.output())
    assert port is not None, running.output()[-4000:]
    wanted = f"demo_game.py --port {port[1]} "
    [pid] = [found.pid for found in processes() if wanted in command_line(found.pid) + " "]
    return pid


def test_it_runs_the_demo_servers_as_real_games_that_deliver_server_started(running):
    _wait_for(
        lambda: _receiver_saw(running, "server.started", "Survival"),
        60,
        "a delivery of server.started",
        running,
    )
    payload = _delivered_payload(running, "server.started", "Survival")
    assert payload["data"] == {"previous_state": "starting"}
    pid = _game_process(running, "Survival")
    assert Path(f"/proc/{pid}").stat().st_uid != 0  # a game never runs as root


def test_it_delivers_server_crashed_when_a_game_is_killed(running):
    _wait_for(
        lambda: _receiver_saw(running, "server.started", "Creative"),
        60,
        "Creative running",
        running,
    )
    os.kill(_game_process(running, "Creative"), signal.SIGKILL)
    _wait_for(
        lambda: _receiver_saw(running, "server.crashed", "Creative"),
        30,
        "a delivery of server.crashed",
        running,
    )
    data = _delivered_payload(running, "server.crashed", "Creative")["data"]
    assert {key: value for key, value in data.items() if key != "last_output"} == {
        "reason": "exited",
        "exit_code": None,
        "signal": 9,
        "oom": False,
        "will_restart": False,  # within a minute of its start: a crash loop, left stopped
    }
    assert data["last_output"][-1].startswith("ready on port")


def test_it_stops_web_worker_and_receiver_within_ten_seconds_of_ctrl_c(running):
    started = descendants(running.process.pid)
    commands = " ".join(command_line(pid) for pid in started)
    for name in ("qcluster", "gunicorn", "demo_receiver", "gshost_agent", "demo_game.py"):
        assert name in commands
    running.process.send_signal(signal.SIGINT)
    try:
        running.process.wait(timeout=STOP_DEADLINE_SECONDS)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after Ctrl-C:\n{running.output()[-4000:]}") from None
    assert "stopped web, worker, receiver and agent" in running.output()
    assert {pid for pid in started if (found := process(pid)) and found.alive} == set()
