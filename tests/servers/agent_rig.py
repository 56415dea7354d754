"""The whole chain for end-to-end tests of agent nodes: the control plane served by gunicorn
(the shipped gunicorn.conf.py) on the test database, the real `qcluster`, a local HTTPS
webhook receiver, and a real `gshost-agent` registered as a node, whose reports go to that
gunicorn and whose games are real processes.

PostgreSQL and Redis only: the web service, the worker and the test share the database, which
the in-memory SQLite test database cannot be.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from servers.fleet.nodes import NodeInput, node_create
from servers.models import Node
from tests.agent.conftest import Agent, AgentFactory
from tests.ports import free_port, free_port_range
from tests.processes import stop_group
from tests.webhooks.receiver import HttpsReceiver
from tests.webhooks.worker_cluster import worker_environment

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).parent / "gunicorn"
API_PATH = "/api/public/v1"


class Web:
    """gunicorn serving the control plane (public API, panel, the agents' internal routes)."""

    def __init__(self, receiver: HttpsReceiver, work: Path, **overrides: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = worker_environment(receiver, **overrides)
        env.update(
            PORT=str(self.port),
            GUNICORN_BIND=f"127.0.0.1:{self.port}",
            GUNICORN_ACCESS_LOG="",
            GUNICORN_WORKERS=env.get("GUNICORN_WORKERS", "2"),
            GUNICORN_THREADS=env.get("GUNICORN_THREADS", "4"),
            PROMETHEUS_MULTIPROC_DIR=str(work / "metrics"),
            DEBUG="false",
        )
        (work / "metrics").mkdir(exist_ok=True)
        with (work / "gunicorn.log").open("wb") as log:
            self.process = subprocess.Popen(
                [str(GUNICORN), "-c", "gunicorn.conf.py", "tests.gshost.loopback_wsgi:application"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.log = work / "gunicorn.log"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/healthz", timeout=1).read()
                return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    said = self.log.read_text()
                    raise AssertionError(f"gunicorn did not start:\n{said}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        stop_group(self.process)


class Api:
    """The public API through the real web service, with one bearer key."""

    def __init__(self, web: Web, key: str) -> None:
        self.base = web.url + API_PATH
        self.session = requests.Session()
        self.session.trust_env = False
        self.session.headers["Authorization"] = f"Bearer {key}"

    def get(self, path: str) -> requests.Response:
        return self.session.get(self.base + path, timeout=30)

    def post(self, path: str, body: dict[str, Any]) -> requests.Response:
        return self.session.post(self.base + path, json=body, timeout=30)


def register_agent_node(
    factory: AgentFactory, certificates: dict[str, Path], web: Web, ports: int = 4
) -> tuple[Node, Agent, str]:
    """A node registered through the service, and its agent (not started yet) holding the
    token and reporting to the web service."""
    agent = factory.make()
    created = node_create(
        data=NodeInput(
            name="node-e2e",
            url=agent.url,
            address="127.0.0.1",
            ports=free_port_range(ports),
            ca_pem=certificates["ca"].read_text(),
        )
    )
    agent.env["AGENT_TOKEN"] = created.token
    agent.env["AGENT_CONTROL_URL"] = web.url
    return created.node, agent, created.token


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if result := condition():
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def events_at(receiver: HttpsReceiver, server_id: str, event: str) -> list[dict[str, Any]]:
    """Bodies of the deliveries of `event` for `server_id` the receiver has taken."""
    return [
        json.loads(request.body)
        for request in list(receiver.requests)
        if request.header("X-Webhook-Event") == event
        and json.loads(request.body)["server"]["id"] == server_id
    ]


def game_credentials(pid: int) -> dict[str, Any]:
    """Real, effective, saved and filesystem ids of a process, and its groups (/proc)."""
    found: dict[str, Any] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("Uid", "Gid"):
            found[name.lower()] = [int(v) for v in value.split()]
        elif name == "Groups":
            found["groups"] = [int(v) for v in value.split()]
    return found


def processes_in(directory: Path) -> list[int]:
    """Live processes whose working directory is inside `directory`."""
    from tests.processes import processes

    found = []
    for candidate in processes():
        try:
            cwd = Path(os.readlink(f"/proc/{candidate.pid}/cwd"))
        except OSError:
            continue
        if candidate.alive and cwd.is_relative_to(directory):
            found.append(candidate.pid)
    return found


def probe_as(credentials: dict[str, Any], paths: list[str]) -> dict[str, str]:
    """Try to read each path with exactly a game's uid, gid and groups: what it could do."""
    script = (
        "import json, os, sys\n"
        "out = {}\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        os.listdir(path) if os.path.isdir(path) else open(path, 'rb').read(1)\n"
        "        out[path] = 'readable'\n"
        "    except OSError as error:\n"
        "        out[path] = type(error).__name__\n"
        "print(json.dumps(out))\n"
    )
    uid, gid = credentials["uid"][0], credentials["gid"][0]
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    done = subprocess.run(
        [python, "-I", "-c", script, *paths],
        user=uid, group=gid, extra_groups=credentials["groups"], cwd="/",
        env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    result: dict[str, str] = json.loads(done.stdout)
    return result
