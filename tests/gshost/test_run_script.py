"""`make run`, run as a newcomer runs it: typed into an interactive shell on a terminal of its own
(a pseudo-terminal, as a terminal window gives). The demo's servers run as real game processes
on a local agent and deliver signed webhooks to the local receiver; a second terminal's
`manage.py` finds the settings `make run` wrote; a second `make run` refuses while the first
holds the ports; and every way of ending it (Ctrl-C, a closed terminal, SIGTERM to `make`,
SIGTERM to its script) stops web, worker, receiver, agent and games, leaving no process behind
and no port taken, so the next `make run` starts cleanly.

Every run of this module shares one SQLite file, one run directory and one set of ports, as
runs in one checkout do; the django-q2 ORM broker carries the tasks.
"""

import asyncio
import contextlib
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import termios
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest

from tests.ports import free_port
from tests.processes import command_line, descendants, process, processes, unmount_under

# make run is SQLite and the ORM broker whatever the suite runs on: once, in the SQLite pass.
pytestmark = pytest.mark.skipif(
    os.environ.get("DATABASE_URL", "").startswith("postgres"),
    reason="make run runs on SQLite; the SQLite pass runs it",
)

ROOT = Path(__file__).resolve().parents[2]
DEMO_SERVERS = ("Survival", "Creative", "Racing league")
START_SECONDS = 180  # the first run installs, migrates and collects static files
STOP_SECONDS = 30
STOPPED = "stopped web, worker, receiver and agent"
PROMPT = b"gshost-terminal$ "


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _wait_for(condition: Callable[[], bool], seconds: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    output = log.read_text(errors="replace") if log.exists() else "(no output)"
    raise AssertionError(f"{what} did not happen within {seconds} s:\n{output[-4000:]}")


def _read(log: Path) -> bytes:
    return log.read_bytes() if log.exists() else b""


def _take_the_terminal() -> None:
    """In the child, after setsid: its stdin, the pseudo-terminal, becomes its controlling
    terminal, so closing the other end hangs it up as closing a terminal window does."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


SHELL = ("bash", "--norc", "--noprofile", "-i")


class Terminal:
    """An interactive bash on a pseudo-terminal, with job control: what a terminal window runs
    (or ``program`` alone, as `ssh -t host make run` runs it: the terminal's session leader).
    Everything written to the terminal (what is typed, echoed, and all that `make run` prints)
    is copied to ``log`` until the window is closed."""

    def __init__(self, env: dict[str, str], log: Path, program: tuple[str, ...] = SHELL) -> None:
        self.master, replica = pty.openpty()
        self.log = log
        self.shell = subprocess.Popen(
            list(program),
            cwd=ROOT,
            env={**env, "HISTFILE": "/dev/null", "PS1": PROMPT.decode()},
            stdin=replica,
            stdout=replica,
            stderr=replica,
            start_new_session=True,
            preexec_fn=_take_the_terminal,
        )
        os.close(replica)
        self.closing = threading.Event()
        self.reader = threading.Thread(target=self._copy_to_log, daemon=True)
        self.reader.start()

    def _copy_to_log(self) -> None:
        with self.log.open("ab") as out:
            while not self.closing.is_set():
                ready, _, _ = select.select([self.master], [], [], 0.1)
                if not ready:
                    continue
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # every process of the terminal is gone
                    return
                if not chunk:
                    return
                out.write(chunk)
                out.flush()

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self) -> None:
        """The window is closed: the kernel hangs up the terminal and its shell gets SIGHUP."""
        if not self.closing.is_set():
            self.closing.set()
            self.reader.join()
            os.close(self.master)


@dataclass
class MakeRun:
    terminal: Terminal
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def make(self) -> int:
        [pid] = [
            pid
            for pid in descendants(self.terminal.shell.pid)
            if command_line(pid).startswith("make run")
        ]
        return pid

    def script(self) -> int:
        """The script make runs, not the watcher of its terminal (a subshell of it)."""
        make = self.make()
        [pid] = [
            pid
            for pid in descendants(self.terminal.shell.pid)
            if "run-web-and-worker.sh" in command_line(pid)
            and (found := process(pid)) is not None
            and found.parent == make
        ]
        return pid

    def started(self) -> set[int]:
        """Every process this run started (the shell that typed `make run` excepted)."""
        return descendants(self.terminal.shell.pid)


@dataclass
class Checkout:
    """What every `make run` of this module shares."""

    env: dict[str, str]
    workdir: Path
    ports: tuple[int, int, int, int]
    runs: int = 0

    def start(self, *, make_leads: bool = False) -> MakeRun:
        """`make run` typed into a shell's terminal, or run as the terminal's leader."""
        self.runs += 1
        log = self.workdir / f"terminal-{self.runs}.log"
        if make_leads:
            terminal = Terminal(self.env, log, program=("make", "run"))
        else:
            terminal = Terminal(self.env, log)
            # Typed once the shell shows its prompt, as a person does.
            _wait_for(lambda: PROMPT in _read(log), 60, "the shell's prompt", log)
            terminal.type(b"make run\n")
        run = MakeRun(terminal, log)
        try:
            _wait_for(
                lambda: all(_receiver_saw(run, "server.started", name) for name in DEMO_SERVERS),
                START_SECONDS,
                "server.started of every demo server",
                log,
            )
        except BaseException:
            _kill_everything_left(run)  # a run that did not start holds its ports for nobody
            raise
        return run

    def second_terminal(self, *command: str) -> subprocess.CompletedProcess[str]:
        """A command typed in another terminal: none of make run's variables, in the checkout."""
        env = {
            name: value
            for name, value in self.env.items()
            if name not in {"SECRET_KEY", "DEBUG", "DEMO", "PORT"}
        }
        return subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )


@pytest.fixture(scope="module", name="checkout")
def checkout_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Checkout]:
    workdir = tmp_path_factory.mktemp("make-run")
    # The games' user must reach their directories: pytest's own temporary tree is private.
    agent_data = Path(tempfile.mkdtemp(prefix="gshost-make-run-test-", dir="/tmp"))
    agent_data.chmod(0o711)
    ports = (free_port(), free_port(), free_port(), free_port())
    env = {
        name: value
        for name, value in os.environ.items()
        # make run writes its own settings file, with a secret key of its own.
        if name not in {"SECRET_KEY", "DJANGO_SETTINGS_MODULE", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    }
    env |= {
        "ENV_FILE": str(workdir / ".env"),
        "DATABASE_URL": f"sqlite:///{workdir / 'db.sqlite3'}",
        "REDIS_URL": "",
        "STATIC_ROOT": str(workdir / "static"),
        "PORT": str(ports[0]),
        "RECEIVER_PORT": str(ports[1]),
        "AGENT_PORT": str(ports[2]),
        "AGENT_SFTP_PORT": str(ports[3]),
        "AGENT_DATA_DIR": str(agent_data),
        "RUN_DIR": str(workdir / "run"),
    }
    checkout = Checkout(env, workdir, ports)
    try:
        yield checkout
    finally:
        unmount_under(agent_data)  # what an agent that was killed left mounted
        shutil.rmtree(agent_data, ignore_errors=True)


def _kill_everything_left(run: MakeRun) -> None:
    """After a failure: the shell and the process group of each thing it started (most run in
    sessions of their own), so nothing outlives the test."""
    shell = run.terminal.shell
    groups = {found.group for pid in descendants(shell.pid) if (found := process(pid))}
    for group in {shell.pid, *groups}:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    run.terminal.close()
    shell.wait()


@contextlib.contextmanager
def _make_run(checkout: Checkout, *, make_leads: bool = False) -> Iterator[MakeRun]:
    run = checkout.start(make_leads=make_leads)
    try:
        yield run
    finally:
        if any((found := process(pid)) and found.alive for pid in run.started()):
            _kill_everything_left(run)
        run.terminal.close()
        run.terminal.shell.wait(timeout=STOP_SECONDS)


@pytest.fixture(scope="module", name="running")
def running_fixture(checkout: Checkout) -> Iterator[MakeRun]:
    with _make_run(checkout) as run:
        yield run


def _receiver_saw(run: MakeRun, event: str, server: str) -> bool:
    return f"[receiver] {event} server='{server}'" in run.output()


def _delivered_payload(run: MakeRun, event: str, server: str) -> dict[str, object]:
    lines = run.output().splitlines()
    index = next(
        i for i, line in enumerate(lines) if f"[receiver] {event} server='{server}'" in line
    )
    assert lines[index].endswith("signature verified")
    return dict(json.loads(lines[index + 1].removeprefix("[receiver]").strip()))


def _demo_server(run: MakeRun, server: str) -> tuple[str, int]:
    """The server's id and game port, as the demo printed them."""
    found = re.search(rf"(srv_\w+) +{server} +demo +node local +127\.0\.0\.1:(\d+)", run.output())
    assert found is not None, run.output()[-4000:]
    return found[1], int(found[2])


def _game_process(run: MakeRun, checkout: Checkout, server: str) -> int:
    wanted = f"demo_game.py --port {_demo_server(run, server)[1]} "
    # Among this run's keepers' processes only: other agents on the machine (the suite's other
    # parts) run demo games on the same port numbers, in network namespaces of their own.
    keepers = {
        found.pid
        for found in processes()
        if f"gshost_agent.keeper {checkout.env['AGENT_DATA_DIR']}/" in command_line(found.pid)
    }
    ours = keepers.union(*(descendants(keeper) for keeper in keepers))
    # The game itself, not the sandbox's processes (bubblewrap's) whose command ends with its.
    [pid] = [
        pid
        for pid in ours
        if wanted in (line := command_line(pid) + " ") and "bwrap" not in line.split()[0]
    ]
    return pid


def _assert_everything_stops(
    run: MakeRun, checkout: Checkout, end: Callable[[MakeRun], None], *, seen: bool = True
) -> None:
    """``end`` ends the run; everything it started is gone, and its ports are free. Unless the
    terminal is gone (``seen`` false), the script said so on it."""
    started = run.started()
    commands = " ".join(command_line(pid) for pid in started)
    for name in ("qcluster", "gunicorn", "demo_receiver", "gshost_agent", "demo_game.py"):
        assert name in commands
    end(run)
    _wait_for(
        lambda: not any((found := process(pid)) and found.alive for pid in started),
        STOP_SECONDS,
        "the end of every process make run started",
        run.log,
    )
    if seen:
        assert STOPPED in run.output()
    assert all(_port_free(port) for port in checkout.ports)


def test_it_runs_the_demo_servers_as_real_games_that_deliver_server_started(running, checkout):
    payload = _delivered_payload(running, "server.started", "Survival")
    assert payload["data"] == {"previous_state": "starting"}
    pid = _game_process(running, checkout, "Survival")
    assert Path(f"/proc/{pid}").stat().st_uid != 0  # a game never runs as root


def test_the_demo_servers_files_are_served_over_sftp(running, checkout):
    found = re.search(r"files: sftp -P (\d+) (\S+)@127\.0\.0\.1", running.output())
    assert found is not None, running.output()[-4000:]
    port, username = int(found[1]), found[2]
    assert port == checkout.ports[3]

    async def upload() -> list[str]:
        async with (
            asyncssh.connect("127.0.0.1", port, username=username, password="demo-password",
                             known_hosts=None, client_keys=None) as connection,
            connection.start_sftp_client() as sftp,
        ):  # fmt: skip
            async with sftp.open("/from-sftp.txt", "wb") as file:
                await file.write(b"uploaded\n")
            return list(await sftp.listdir("/"))

    assert "from-sftp.txt" in asyncio.run(upload())
    server_id = username.rpartition(".")[2]
    written = Path(checkout.env["AGENT_DATA_DIR"]) / "servers" / server_id / "from-sftp.txt"
    assert written.read_bytes() == b"uploaded\n"


def test_a_second_make_run_refuses_while_the_first_holds_its_ports(running, checkout):
    ca = Path(checkout.env["RUN_DIR"], "ca.pem").read_bytes()
    second = subprocess.run(
        ["make", "run"], cwd=ROOT, env=checkout.env, capture_output=True, text=True, timeout=180
    )
    assert second.returncode != 0
    assert "is taken" in second.stderr
    assert "Demo data is ready" not in second.stdout
    # The running receiver's CA, which the running worker trusts, is left as it is.
    assert Path(checkout.env["RUN_DIR"], "ca.pem").read_bytes() == ca


def test_a_second_terminal_runs_manage_py_with_the_settings_make_run_wrote(running, checkout):
    server_id, _port = _demo_server(running, "Racing league")
    result = checkout.second_terminal(
        str(ROOT / ".venv/bin/python"), "manage.py", "simulate", server_id, "crash"
    )
    assert result.returncode == 0, result.stderr
    _wait_for(
        lambda: _receiver_saw(running, "server.crashed", "Racing league"),
        60,
        "a delivery of server.crashed",
        running.log,
    )


def test_it_delivers_server_crashed_when_a_game_is_killed(running, checkout):
    os.kill(_game_process(running, checkout, "Creative"), signal.SIGKILL)
    _wait_for(
        lambda: _receiver_saw(running, "server.crashed", "Creative"),
        60,
        "a delivery of server.crashed",
        running.log,
    )
    data = _delivered_payload(running, "server.crashed", "Creative")["data"]
    assert {key: value for key, value in data.items() if key != "last_output"} == {
        "reason": "exited",
        "exit_code": None,
        "signal": 9,
        "oom": False,
        "will_restart": False,  # within a minute of its start: a crash loop, left stopped
    }
    # The game's last lines: its ready line, and whatever it answered since (`players 0:` to a
    # readings poll).
    assert any(line.startswith("ready on port") for line in data["last_output"])


def test_ctrl_c_stops_everything_it_started(running, checkout):
    _assert_everything_stops(running, checkout, lambda run: run.terminal.type(b"\x03"))


def test_a_closed_terminal_stops_everything_it_started(checkout):
    with _make_run(checkout) as run:
        _assert_everything_stops(run, checkout, lambda run: run.terminal.close(), seen=False)


def test_a_closed_terminal_stops_everything_when_make_is_its_leader(checkout):
    """The kernel's SIGHUP goes to make alone, which passes it to no one."""
    with _make_run(checkout, make_leads=True) as run:
        _assert_everything_stops(run, checkout, lambda run: run.terminal.close(), seen=False)


def test_sigterm_to_make_stops_everything_it_started(checkout):
    with _make_run(checkout) as run:
        _assert_everything_stops(run, checkout, lambda run: os.kill(run.make(), signal.SIGTERM))


def test_sigterm_to_its_script_stops_everything_it_started(checkout):
    with _make_run(checkout) as run:
        _assert_everything_stops(run, checkout, lambda run: os.kill(run.script(), signal.SIGTERM))
