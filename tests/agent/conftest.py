"""A real agent (`python -m gshost_agent`) with real keepers and games, the stand-in control
plane of tests/agent/control_plane.py that records what the agent reports, and certificates
made by trustme.

Every process a test starts is ended by the fixtures: the agent, and every keeper and game
found under the test's data directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
import trustme

from gshost_agent import sandbox
from gshost_agent.netns import Networks, Registry
from tests.agent.control_plane import TOKEN, ControlPlane
from tests.agent.lines import LineReader, wait_until
from tests.ports import free_port
from tests.processes import unmount_under

ROOT = Path(__file__).resolve().parents[2]
BASE62 = string.digits + string.ascii_letters
CGROUP_ROOT = Path("/sys/fs/cgroup/memory/gshost")

# Games that misbehave on purpose, as templates of the operator's own (AGENT_GAMES_DIR).
TEST_TEMPLATES = {
    # The demo game, whose template's stop command it does not know: it ignores it, and
    # the console's `stop` is then no stop request, just a game ending on its own.
    "stubborn": """
name = "stubborn"
command = ["{python}", "-I", "{game_files}/demo_game.py", "--port", "{port}"]
environment = { PYTHONUNBUFFERED = "1" }
files = ["demo_game.py"]
ready_pattern = '^ready on port \\d+$'
stop_command = "halt-please"
stop_timeout_seconds = 2
""",
    "silent": """
name = "silent"
command = ["{python}", "-c", "import time; print('booting', flush=True); time.sleep(120)"]
ready_pattern = '^ready$'
ready_timeout_seconds = 2
stop_command = ""
stop_signal = "SIGTERM"
""",
    "quitter": """
name = "quitter"
command = ["{python}", "-c", "print('cannot find the map', flush=True); raise SystemExit(3)"]
ready_pattern = '^ready$'
""",
    # Ready, then takes memory a megabyte at a time when told to (`eat`).
    "hog": """
name = "hog"
command = ["{python}", "-I", "{game_files}/hog.py"]
files = ["hog.py"]
ready_pattern = '^ready$'
stop_command = ""
""",
    # Its file is missing from its directory: the agent cannot even start it.
    "broken": """
name = "broken"
command = ["{python}", "{game_files}/missing.py"]
files = ["missing.py"]
ready_pattern = '^ready$'
""",
    # Starts a child of its own in a session of its own (out of its process group).
    "escaper": """
name = "escaper"
command = ["{python}", "-I", "{game_files}/escaper.py"]
files = ["escaper.py"]
ready_pattern = '^ready$'
stop_command = ""
""",
    # A customer's game that attacks its node: it runs the probe each console line names
    # (HOSTILE below) and prints what came of it.
    "hostile": """
name = "hostile"
command = ["{python}", "-I", "{game_files}/hostile.py", "{port}"]
environment = { PYTHONUNBUFFERED = "1" }
files = ["hostile.py"]
ready_pattern = '^ready$'
stop_command = ""
stop_timeout_seconds = 2
""",
    # The hostile game with a file denylist, for the file routes: it plants links with `link`.
    "planter": """
name = "planter"
command = ["{python}", "-I", "{game_files}/hostile.py", "{port}"]
environment = { PYTHONUNBUFFERED = "1" }
files = ["hostile.py"]
ready_pattern = '^ready$'
stop_command = ""
stop_timeout_seconds = 2
file_denylist = ["*.key", "private/"]
""",
    # Prints who it is, then tries to read each path the console gives it.
    "snoop": """
name = "snoop"
command = ["{python}", "-I", "{game_files}/snoop.py"]
files = ["snoop.py"]
ready_pattern = '^ready$'
stop_command = ""
""",
}

SNOOP = """
import json, os, sys
print(json.dumps({
    "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
    "env": sorted(os.environ),
}), flush=True)
print("ready", flush=True)
for line in sys.stdin:
    path = line.strip()
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").read(1)
        print(f"readable {path}", flush=True)
    except OSError as error:
        print(f"refused {path}: {type(error).__name__}", flush=True)
"""

HOSTILE = """
import os, socket, sys, threading, time

def serve(listener):
    while True:
        client, _ = listener.accept()
        client.sendall(b"HOSTILE\\n")
        client.close()

def probe(words):
    name, arguments = words[0], words[1:]
    if name == "kill":  # kill PID SIGNAL
        os.kill(int(arguments[0]), int(arguments[1]))
        return "sent"
    if name == "pids":
        return " ".join(sorted((e for e in os.listdir("/proc") if e.isdigit()), key=int))
    if name == "bind":  # takes a port on all addresses and answers HOSTILE
        listener = socket.create_server(("0.0.0.0", int(arguments[0])))
        threading.Thread(target=serve, args=(listener,), daemon=True).start()
        return "bound"
    if name == "connect":  # HOST PORT; dropped: failed after 1 s (a local peer answers in ms)
        socket.create_connection((arguments[0], int(arguments[1])), timeout=1).close()
        return "connected"
    if name == "put":  # PATH: a file with a line in it
        with open(arguments[0], "w") as file:
            file.write("secret\\n")
        return "written"
    if name == "link":  # TARGET PATH: a symbolic link, whatever its target
        os.symlink(arguments[0], arguments[1])
        return "linked"
    if name == "ls":
        return "[" + ",".join(sorted(os.listdir(arguments[0]))) + "]"
    if name == "fill":  # PATH MB: a megabyte at a time, kept on disk
        with open(arguments[0], "wb") as file:
            for _ in range(int(arguments[1])):
                file.write(b"x" * (1 << 20))
                file.flush()
        return "filled"
    if name == "fork":  # N children that wait a while, then end
        children = 0
        try:
            for _ in range(int(arguments[0])):
                if os.fork() == 0:
                    time.sleep(3)
                    os._exit(0)
                children += 1
        finally:
            print(f"forked {children}", flush=True)
        return "all forked"
    if name == "spin":  # SECONDS of wall time busy: the CPU seconds it got
        end = time.monotonic() + float(arguments[0])
        begun = time.process_time()
        while time.monotonic() < end:
            pass
        return f"{time.process_time() - begun:.2f}"
    raise ValueError(f"no probe {name}")

print("ready", flush=True)
for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    try:
        print(f"{words[0]}: {probe(words)}", flush=True)
    except Exception as error:
        print(f"{words[0]}: failed {type(error).__name__}", flush=True)
"""

ESCAPER = """
import subprocess, sys
sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
child = subprocess.Popen(sleeper, start_new_session=True)
print(f"child {child.pid}", flush=True)
print("ready", flush=True)
sys.stdin.readline()
"""

HOG = """
import sys
print("ready", flush=True)
sys.stdin.readline()
heap = []
while True:
    heap.append(bytearray(1 << 20))
"""


def new_server_id() -> str:
    return "srv_" + "".join(secrets.choice(BASE62) for _ in range(20))


@pytest.fixture(scope="session", autouse=True)
def networks_swept() -> Iterator[None]:
    """The networks of the games the fixtures killed (with their agents, which had no time to
    remove them) are swept at the end, as the next agent on the machine would."""
    yield
    sandboxing = sandbox.detect(
        privileged=os.geteuid() == 0, has_cgroups=True, allow_unsandboxed=False
    )
    if sandboxing.sandboxed:
        networks = Networks(
            sandboxing.tool("ip"),
            sandboxing.tool("iptables"),
            sandboxing.tool("iptables-restore"),
            Registry(),
        )
        asyncio.run(networks.sweep())


@pytest.fixture(scope="session")
def certificates() -> Iterator[dict[str, Path]]:
    directory = Path(tempfile.mkdtemp(prefix="gshost-agent-tls-", dir="/tmp"))
    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1", "localhost")
    paths = {
        "ca": directory / "ca.pem",
        "cert": directory / "cert.pem",
        "key": directory / "key.pem",
    }
    authority.cert_pem.write_to_path(str(paths["ca"]))
    issued.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    issued.private_key_pem.write_to_path(str(paths["key"]))
    yield paths
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def games_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="gshost-agent-games-", dir="/tmp"))
    for name, text in TEST_TEMPLATES.items():
        (directory / f"{name}.toml").write_text(text)
    (directory / "snoop.py").write_text(SNOOP)
    (directory / "hog.py").write_text(HOG)
    (directory / "escaper.py").write_text(ESCAPER)
    (directory / "hostile.py").write_text(HOSTILE)
    os.chmod(directory, 0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


# The control plane ---------------------------------------------------------------------------


@pytest.fixture
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane(port=free_port())
    plane.up()
    yield plane
    plane.down()
    assert plane.malformed == []  # everything the agent sent was a protocol message


# The agent ----------------------------------------------------------------------------------


# Agents started by this test process: a failed test shows what those still running logged.
RUNNING: weakref.WeakSet[Agent] = weakref.WeakSet()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.failed:
        for agent in list(RUNNING):
            if agent.process is not None and agent.process.poll() is None and agent.output:
                logged = "\n".join(agent.output.so_far()[-60:])
                report.sections.append((f"agent on port {agent.port} logged", logged))
    return report


class Agent:
    def __init__(self, *, data_dir: Path, env: dict[str, str], port: int, ca: Path) -> None:
        self.data_dir = data_dir
        self.env = env
        self.port = port
        self.ca = ca
        self.process: subprocess.Popen[str] | None = None
        self.output: LineReader | None = None
        self.started: list[str] = []
        # Keep-alive, a connection per thread: a TLS handshake per call cost the agent and the
        # test 5 ms of CPU each, and the tests poll.
        self._sessions = threading.local()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def command(self, python: str, *arguments: str) -> list[str]:
        return [python, "-m", "gshost_agent", *arguments]

    def start(self, *arguments: str, python: str = sys.executable, user: int | None = None) -> None:
        self.process = subprocess.Popen(
            self.command(python, *arguments),
            env=self.env,
            cwd=ROOT,
            user=user,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stderr is not None
        self.output = LineReader(self.process.stderr)
        RUNNING.add(self)
        self.output.wait_for("listening on https://", timeout=30)

    def request(
        self, method: str, path: str, body: Any = None, token: str = TOKEN
    ) -> requests.Response:
        if (session := getattr(self._sessions, "session", None)) is None:
            session = self._sessions.session = requests.Session()
        return session.request(
            method,
            self.url + path,
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            verify=str(self.ca),
            timeout=20,
        )

    def start_server(self, game: str = "demo", **overrides: Any) -> tuple[str, int]:
        server_id = overrides.pop("server_id", None) or new_server_id()
        given = overrides.pop("port", None)
        for _ in range(3):
            # A free port picked here may be taken by another program before the game binds it:
            # the agent then says port_in_use, and another one is picked (unless one was given).
            port = given or free_port()
            body = {"game": game, "port": port, "memory_mb": 256, "settings": {}, **overrides}
            answer = self.request("POST", f"/v1/servers/{server_id}/start", body)
            taken = answer.status_code == 409 and "port_in_use" in answer.text
            if given is not None or not taken:
                break
        assert answer.status_code == 202, answer.text
        self.started.append(server_id)
        return server_id, port

    def console(self, server_id: str, command: str) -> requests.Response:
        return self.request("POST", f"/v1/servers/{server_id}/console", {"command": command})

    def wait_for_console(self, server_id: str, pattern: str, timeout: float = 10.0) -> str:
        import re

        def found() -> str | None:
            answer = self.request("GET", f"/v1/servers/{server_id}/console").json()
            for line in answer["lines"]:
                if re.search(pattern, line["text"]):
                    return str(line["text"])
            return None

        return wait_until(found, timeout, interval=0.1)

    def state_of(self, server_id: str) -> str:
        return str(self.request("GET", "/v1/node").json()["servers"].get(server_id, "unknown"))

    def run_dir(self, server_id: str) -> Path:
        return self.data_dir / "run" / server_id

    def game_pid(self, server_id: str) -> int:
        return int(json.loads((self.run_dir(server_id) / "game.json").read_text())["pid"])

    def game_process(self, server_id: str) -> psutil.Process:
        """The game itself: inside its sandbox, below bubblewrap's two processes."""
        process = psutil.Process(self.game_pid(server_id))
        while process.name() == "bwrap":
            process = wait_until(lambda p=process: next(iter(p.children()), None), timeout=10)
        return process

    def keeper_pid(self, server_id: str) -> int:
        return int(json.loads((self.run_dir(server_id) / "game.json").read_text())["keeper_pid"])

    def end(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)

    def leftovers(self) -> list[psutil.Process]:
        """Keepers and games of this agent's data directory still alive."""
        marker = str(self.data_dir)
        found = []
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if process.pid == os.getpid() or process.status() == psutil.STATUS_ZOMBIE:
                    continue
                if marker in " ".join(process.cmdline()) or process.cwd().startswith(marker):
                    found.append(process)
        return found


class AgentFactory:
    """Makes agents on fresh data directories; `clean_up` ends them and all they started."""

    def __init__(
        self, certificates: dict[str, Path], games_dir: Path, control_plane: ControlPlane
    ) -> None:
        self.certificates = certificates
        self.games_dir = games_dir
        self.control_plane = control_plane
        self.agents: list[Agent] = []

    def make(self, data_dir: Path | None = None) -> Agent:
        if data_dir is None:
            data_dir = Path(tempfile.mkdtemp(prefix="gshost-agent-", dir="/tmp"))
            os.chmod(data_dir, 0o711)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "AGENT_TOKEN": TOKEN,
            "AGENT_CONTROL_URL": self.control_plane.url,
            "AGENT_DATA_DIR": str(data_dir),
            "AGENT_BIND": f"127.0.0.1:{free_port()}",
            "AGENT_TLS_CERT": str(self.certificates["cert"]),
            "AGENT_TLS_KEY": str(self.certificates["key"]),
            "AGENT_GAMES_DIR": str(self.games_dir),
            "AGENT_SFTP_PORT": "0",  # a test that serves SFTP gives it a free port
        }
        agent = Agent(
            data_dir=data_dir,
            env=env,
            port=int(env["AGENT_BIND"].rsplit(":", 1)[1]),
            ca=self.certificates["ca"],
        )
        self.agents.append(agent)
        return agent

    def clean_up(self) -> None:
        for agent in self.agents:
            if agent.process is not None and agent.process.poll() is None:
                agent.process.kill()
                agent.process.wait(timeout=10)
            for process in agent.leftovers():
                with contextlib.suppress(psutil.Error, OSError):  # a sandboxed game leads none
                    os.killpg(process.pid, signal.SIGKILL)
                with contextlib.suppress(psutil.Error):
                    process.kill()
            psutil.wait_procs(agent.leftovers(), timeout=5)
            for server_id in agent.started:
                wait_until(lambda server_id=server_id: _cgroup_removed(server_id), timeout=5)
            unmount_under(agent.data_dir)
            shutil.rmtree(agent.data_dir, ignore_errors=True)


@pytest.fixture
def make_agent(
    certificates: dict[str, Path], games_dir: Path, control_plane: ControlPlane
) -> Iterator[Any]:
    factory = AgentFactory(certificates, games_dir, control_plane)
    yield factory.make
    factory.clean_up()


@pytest.fixture
def agent(make_agent: Any) -> Agent:
    started: Agent = make_agent()
    started.start()
    return started


@pytest.fixture(scope="module")
def module_control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane(port=free_port())
    plane.up()
    yield plane
    plane.down()
    assert plane.malformed == []  # everything the agent sent was a protocol message


@pytest.fixture(scope="module")
def module_agent(
    certificates: dict[str, Path], games_dir: Path, module_control_plane: ControlPlane
) -> Iterator[Agent]:
    """One agent for a module whose tests only look (they change nothing another would see)."""
    factory = AgentFactory(certificates, games_dir, module_control_plane)
    started = factory.make()
    started.start()
    yield started
    factory.clean_up()


def _cgroup_removed(server_id: str) -> bool:
    """A cgroup can go once the last of its processes has been reaped: a moment after a kill."""
    with contextlib.suppress(OSError):
        (CGROUP_ROOT / server_id).rmdir()
    return not (CGROUP_ROOT / server_id).exists()


def wait_for_exit(pid: int, timeout: float = 15.0) -> None:
    wait_until(lambda: not psutil.pid_exists(pid) or _zombie(pid), timeout)


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def elapsed(since: float) -> float:
    return time.monotonic() - since
