"""A fleet for end-to-end tests: the control plane served by gunicorn over HTTPS on the
bridge's address, and a real `gshost-agent` in each host's namespace (tests/fleet/netns.py),
registered as a node with its own address, reporting to that gunicorn, running demo games.

PostgreSQL and Redis only: gunicorn and the test share the database and the cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import requests
import trustme
from django.conf import settings
from django.db import connection

from servers.fleet.nodes import NodeInput, node_create
from servers.models import Node
from tests.agent.lines import LineReader
from tests.fleet.netns import Host, Network
from tests.ports import free_port
from tests.processes import stop_group, unmount_under

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).parent / "gunicorn"
AGENT_PORT = 8444
CGROUP_ROOT = Path("/sys/fs/cgroup/memory/gshost")


def wait_until(condition: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if result := condition():
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def _database_url() -> str:
    db = connection.settings_dict
    return (
        f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}"
    )


class Certificates:
    """One throw-away CA; a certificate per address (the web's, each agent's)."""

    def __init__(self) -> None:
        self.ca = trustme.CA()
        self.directory = Path(tempfile.mkdtemp(prefix="gshost-fleet-tls-", dir="/tmp"))
        self.ca_path = self.directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_path))

    @property
    def ca_pem(self) -> str:
        return self.ca_path.read_text()

    def issue(self, address: str) -> tuple[Path, Path]:
        issued = self.ca.issue_cert(address)
        cert, key = self.directory / f"{address}.pem", self.directory / f"{address}.key"
        issued.cert_chain_pems[0].write_to_path(str(cert))
        issued.private_key_pem.write_to_path(str(key))
        return cert, key

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


class FleetWeb:
    """gunicorn (the shipped configuration) with sync workers, HTTPS on the bridge's address."""

    def __init__(self, network: Network, certificates: Certificates, work: Path, workers: int):
        self.port = free_port()
        self.url = f"https://{network.gateway}:{self.port}"
        cert, key = certificates.issue(network.gateway)
        env = {
            **os.environ,
            "DATABASE_URL": _database_url(),
            "REDIS_URL": settings.REDIS_URL,
            "SECRET_KEY": settings.SECRET_KEY,
            "WEBHOOK_SECRET_KEYS": ",".join(settings.WEBHOOK_SECRET_KEYS),
            "LOG_LEVEL": "WARNING",
            "GUNICORN_BIND": f"{network.gateway}:{self.port}",
            "GUNICORN_WORKERS": str(workers),
            "GUNICORN_ACCESS_LOG": "",
            "PROMETHEUS_MULTIPROC_DIR": str(work / "metrics"),
            "DEBUG": "false",
            "ALLOWED_HOSTS": network.gateway,
        }
        (work / "metrics").mkdir(exist_ok=True)
        self.log = work / "gunicorn.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [str(GUNICORN), "-c", "gunicorn.conf.py", "--worker-class", "sync",
                 "--certfile", str(cert), "--keyfile", str(key), "gshost.wsgi:application"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.session = requests.Session()
        self.session.trust_env = False
        self.session.verify = str(certificates.ca_path)
        try:
            wait_until(self._healthy, 60, "gunicorn to answer", interval=0.2)
        except AssertionError:
            self.stop()
            raise AssertionError(f"gunicorn did not start:\n{self.log.read_text()}") from None

    def _healthy(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"gunicorn ended:\n{self.log.read_text()}")
        try:
            return self.session.get(f"{self.url}/healthz", timeout=2).ok
        except requests.RequestException:
            return False

    def api(self, key: str, method: str, path: str, body: Any = None) -> requests.Response:
        return self.session.request(
            method, f"{self.url}/api/public/v1{path}", json=body, timeout=60,
            headers={"Authorization": f"Bearer {key}"},
        )  # fmt: skip

    def stop(self) -> None:
        stop_group(self.process)


class FleetAgent:
    """`gshost-agent` as root in a host's namespace, its node registered with the web."""

    def __init__(
        self, host: Host, certificates: Certificates, web: FleetWeb, node: Node, token: str
    ) -> None:
        self.host, self.node = host, node
        self.data_dir = Path(tempfile.mkdtemp(prefix="gshost-fleet-agent-", dir="/tmp"))
        os.chmod(self.data_dir, 0o711)
        cert, key = certificates.issue(host.address)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "AGENT_TOKEN": token,
            "AGENT_CONTROL_URL": web.url,
            "AGENT_CONTROL_CA": str(certificates.ca_path),
            "AGENT_DATA_DIR": str(self.data_dir),
            "AGENT_BIND": f"{host.address}:{AGENT_PORT}",
            "AGENT_TLS_CERT": str(cert),
            "AGENT_TLS_KEY": str(key),
        }
        self.process: subprocess.Popen[str] | None = None
        self.output: LineReader | None = None

    def launch(self) -> None:
        self.process = subprocess.Popen(
            self.host.command(sys.executable, "-m", "gshost_agent"),
            env=self.env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stderr is not None
        self.output = LineReader(self.process.stderr)

    def wait_listening(self) -> None:
        assert self.output is not None
        self.output.wait_for("listening on https://", timeout=60)

    def game_pid(self, server_id: str) -> int:
        path = self.data_dir / "run" / server_id / "game.json"
        return int(json.loads(path.read_text())["pid"])

    def pending_reports(self) -> int:
        """Reports in its outbox not yet acknowledged."""
        return len([p for p in (self.data_dir / "outbox").glob("*.json") if p.stem.isdigit()])

    def clean_up(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        marker = str(self.data_dir)
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if process.pid != os.getpid() and (
                    marker in " ".join(process.cmdline()) or process.cwd().startswith(marker)
                ):
                    process.kill()
        for server in self.node.servers.values_list("id", flat=True):
            _remove_cgroup(server)
        unmount_under(self.data_dir)  # its servers' filesystems, which a killed agent leaves
        shutil.rmtree(self.data_dir, ignore_errors=True)


def _remove_cgroup(server_id: str) -> None:
    deadline = time.monotonic() + 5
    while (CGROUP_ROOT / server_id).exists() and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            (CGROUP_ROOT / server_id).rmdir()
        time.sleep(0.05)


def start_agents(
    hosts: list[Host], certificates: Certificates, web: FleetWeb, agents: list[FleetAgent]
) -> None:
    """A node registered and an agent started per host, all at once; each is in `agents` as
    soon as it exists, so a teardown ends every one even when a later one fails."""
    for host in hosts:
        created = node_create(
            data=NodeInput(
                name=f"fleet-{host.index}",
                url=f"https://{host.address}:{AGENT_PORT}",
                address=host.address,
                ports="27000-27009",
                ca_pem=certificates.ca_pem,
            )
        )
        agents.append(FleetAgent(host, certificates, web, created.node, created.token))
    for agent in agents:
        agent.launch()
    with ThreadPoolExecutor(max_workers=len(agents)) as pool:
        list(pool.map(FleetAgent.wait_listening, agents))
