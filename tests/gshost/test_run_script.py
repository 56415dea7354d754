"""`make run`'s script: the demo delivers a signed webhook to the local receiver, and Ctrl-C
stops web, worker and receiver within 10 s, leaving no process behind.

The script runs as `make run` runs it: on its own SQLite file, with the django-q2 ORM broker.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.processes import command_line, descendants, process

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
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{workdir / 'db.sqlite3'}",
        "REDIS_URL": "",
        "DEBUG": "true",
        "DEMO": "1",
        "PORT": str(_free_port()),
        "RECEIVER_PORT": str(_free_port()),
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


def _kill_everything_left(script: subprocess.Popen[bytes]) -> None:
    """After a failure: the script and the process group of each thing it started (each runs
    in a session of its own), so nothing outlives the test."""
    groups = {found.group for pid in descendants(script.pid) if (found := process(pid))}
    for group in {script.pid, *groups}:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    script.wait()


def _start_a_demo_server(running: Running) -> None:
    code = (
        "from audit.actors import Actor\n"
        "from servers.models import Server\n"
        "from servers.services import PowerAction, server_power\n"
        "server = Server.objects.get(name='Survival', organization__slug='demo')\n"
        "server_power(server=server, action=PowerAction.START, actor=Actor.system('test'))\n"
    )
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=running.env,
        check=True,
        timeout=60,
        capture_output=True,
    )


def test_it_delivers_a_signed_webhook_to_the_local_receiver(running):
    _start_a_demo_server(running)
    _wait_for(
        lambda: "[receiver] server.started server='Survival'" in running.output(),
        30,
        "a delivery of server.started",
        running,
    )
    line = next(
        line for line in running.output().splitlines() if "[receiver] server.started" in line
    )
    assert line.endswith("signature verified")


def test_it_stops_web_worker_and_receiver_within_ten_seconds_of_ctrl_c(running):
    started = descendants(running.process.pid)
    commands = " ".join(command_line(pid) for pid in started)
    assert all(name in commands for name in ("qcluster", "gunicorn", "demo_receiver"))
    running.process.send_signal(signal.SIGINT)
    try:
        running.process.wait(timeout=STOP_DEADLINE_SECONDS)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after Ctrl-C:\n{running.output()[-4000:]}") from None
    assert "stopped web, worker and receiver" in running.output()
    assert {pid for pid in started if (found := process(pid)) and found.alive} == set()
