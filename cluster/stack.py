"""One cluster: its network, its services (Redis, PgBouncer, HAProxy) and its hosts (web
replicas, worker hosts), started in that order and stopped in the reverse one."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from cluster.configs import Backend, haproxy_config, pgbouncer_config
from cluster.network import Host, Network
from cluster.processes import Process, stop_all

ROOT = Path(__file__).resolve().parent.parent
WEB_PORT = 8000  # inside each replica's namespace: every namespace has its own ports
STOP_GRACE_SECONDS = 15.0  # a worker gives back its deliveries within 15 s
START_TIMEOUT_SECONDS = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(address: str, port: int, timeout: float, process: Process) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.running():
            raise RuntimeError(f"{process.name} exited at start; see {process.log}")
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{process.name} did not listen on {address}:{port}; see {process.log}")


@dataclass
class ClusterSettings:
    """What differs between `make cluster`, a fault test and the load test."""

    database_url: str  # PostgreSQL itself; the hosts reach it through PgBouncer
    web_replicas: int = 2
    worker_hosts: int = 2
    port: int = 0  # HAProxy's port on 127.0.0.1; 0 takes a free one
    secret_key: str = ""
    web_workers: int = 1  # gunicorn processes per replica (each with GUNICORN_THREADS threads)
    queue_workers: int = 2  # qcluster processes per worker host
    pool_size: int = 16  # PgBouncer's server connections to PostgreSQL
    env: Mapping[str, str] = field(default_factory=dict)  # more settings for every host
    run_dir: Path | None = None


class Cluster:
    def __init__(self, settings: ClusterSettings) -> None:
        self.settings = settings
        self.secret_key = settings.secret_key or secrets.token_urlsafe(50)
        self.run_dir = settings.run_dir or Path(tempfile.mkdtemp(prefix="gshost-cluster-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir.chmod(0o755)  # PgBouncer runs as postgres and reads its files here
        self.network: Network | None = None
        self.port = settings.port or free_port()
        self.pgbouncer_port = free_port()
        self.redis_port = free_port()
        self.redis: Process | None = None
        self.pgbouncer: Process | None = None
        self.haproxy: Process | None = None
        self.web: list[Process] = []
        self.workers: list[Process] = []
        self.hosts: dict[str, Host] = {}

    # --- addresses -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def database_name(self) -> str:
        return urlsplit(self.settings.database_url).path.lstrip("/")

    @property
    def gateway(self) -> str:
        assert self.network is not None
        return self.network.gateway

    def pooled_database_url(self, address: str) -> str:
        parts = urlsplit(self.settings.database_url)
        user = parts.username or "postgres"
        return urlunsplit(
            (parts.scheme, f"{user}@{address}:{self.pgbouncer_port}", parts.path, "", "")
        )

    def host_env(self) -> dict[str, str]:
        """The settings of every replica and worker (and of a command run for the cluster)."""
        gateway = self.gateway
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "DJANGO_SETTINGS_MODULE": "gshost.settings",
            "SECRET_KEY": self.secret_key,
            "DEBUG": "false",
            "DATABASE_URL": self.pooled_database_url(gateway),
            "DATABASE_POOLER": "pgbouncer",
            "REDIS_URL": f"redis://{gateway}:{self.redis_port}/0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "TRUSTED_PROXIES": f"{gateway}/32",
            "METRICS_ALLOWED_NETWORKS": f"127.0.0.1/32,{gateway}/32",
            "PYTHONUNBUFFERED": "1",
        }
        env.update(self.settings.env)
        return env

    def command_env(self) -> dict[str, str]:
        """For a command run on this machine against the cluster's database (migrate, seed)."""
        return {**self.host_env(), "DATABASE_URL": self.pooled_database_url("127.0.0.1")}

    # --- starting --------------------------------------------------------------------------

    def create_network(self) -> str:
        """The cluster's bridge, before anything starts; returns the machine's address on it
        (for a service of the caller's that the hosts must reach, such as a webhook receiver)."""
        if self.network is None:
            self.network = Network.create()
        return self.network.gateway

    def start(self) -> None:
        try:
            self.create_network()
            self._start_redis()
            self._start_pgbouncer()
            self._migrate()
            for number in range(1, self.settings.web_replicas + 1):
                self.web.append(self._start_web(f"web{number}"))
            for number in range(1, self.settings.worker_hosts + 1):
                self.workers.append(self._start_worker(f"worker{number}"))
            for process in self.web:
                wait_for_port(
                    self.hosts[process.name].address, WEB_PORT, START_TIMEOUT_SECONDS, process
                )
            self._start_haproxy()
        except BaseException:
            self.stop()
            raise

    def _process(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Process:
        process = Process(name, argv, self.run_dir / f"{name}.log", env or os.environ, ROOT)
        process.start()
        return process

    def _start_redis(self) -> None:
        self.redis = self._process("redis", self._redis_argv())
        wait_for_port("127.0.0.1", self.redis_port, 10, self.redis)

    def _redis_argv(self) -> list[str]:
        return [
            "redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", self.gateway,
            "--save", "", "--appendonly", "no", "--protected-mode", "no",
            "--dir", str(self.run_dir),
        ]  # fmt: skip

    def start_redis(self) -> None:
        """Start Redis again after stop_redis (a fault test)."""
        self._start_redis()

    def stop_redis(self) -> None:
        assert self.redis is not None
        stop_all([self.redis], 5)

    def _start_pgbouncer(self) -> None:
        parts = urlsplit(self.settings.database_url)
        user = parts.username or "postgres"
        auth_file = self.run_dir / "pgbouncer-users.txt"
        auth_file.write_text(f'"{user}" ""\n')
        config = self.run_dir / "pgbouncer.ini"
        config.write_text(
            pgbouncer_config(
                listen=["127.0.0.1", self.gateway],
                port=self.pgbouncer_port,
                database=self.database_name,
                upstream_host=parts.hostname or "127.0.0.1",
                upstream_port=parts.port or 5432,
                auth_file=str(auth_file),
                pool_size=self.settings.pool_size,
            )
        )
        argv = ["pgbouncer", str(config)]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            argv[1:1] = ["-u", _unprivileged_user()]
        self.pgbouncer = self._process("pgbouncer", argv)
        wait_for_port("127.0.0.1", self.pgbouncer_port, 10, self.pgbouncer)

    def restart_pgbouncer(self) -> None:
        assert self.pgbouncer is not None
        stop_all([self.pgbouncer], 5)
        self.pgbouncer = self._process("pgbouncer", self.pgbouncer.argv)
        wait_for_port("127.0.0.1", self.pgbouncer_port, 10, self.pgbouncer)

    def _migrate(self) -> None:
        _create_database(self.settings.database_url)
        env = {**self.command_env(), "DATABASE_URL": self.settings.database_url}
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "--verbosity", "0"],
            cwd=ROOT, env=env, check=True,
        )  # fmt: skip

    def _add_host(self, name: str) -> Host:
        assert self.network is not None
        host = self.network.add_host(name)
        self.hosts[name] = host
        return host

    def _start_web(self, name: str) -> Process:
        host = self._add_host(name)
        env = {
            **self.host_env(),
            "GUNICORN_BIND": f"0.0.0.0:{WEB_PORT}",
            "GUNICORN_WORKERS": str(self.settings.web_workers),
            "GUNICORN_GRACEFUL_TIMEOUT": "5",
            "GUNICORN_ACCESS_LOG": "",
            "PROMETHEUS_MULTIPROC_DIR": str(self.run_dir / f"{name}-metrics"),
        }
        gunicorn = str(Path(sys.executable).parent / "gunicorn")
        argv = host.command(
            [
                gunicorn,
                "--config",
                str(ROOT / "gunicorn.conf.py"),
                "--name",
                f"gshost-{name}",
                "--no-control-socket",
            ]
        )
        return self._process(name, argv, env)

    def _start_worker(self, name: str) -> Process:
        host = self._add_host(name)
        env = {**self.host_env(), "Q_WORKERS": str(self.settings.queue_workers)}
        return self._process(name, host.command([sys.executable, "manage.py", "qcluster"]), env)

    def _start_haproxy(self) -> None:
        threads = int(self.host_env().get("GUNICORN_THREADS", "8"))
        maxconn = self.settings.web_workers * threads
        backends = [
            Backend(p.name, self.hosts[p.name].address, WEB_PORT, maxconn) for p in self.web
        ]
        config = self.run_dir / "haproxy.cfg"
        config.write_text(
            haproxy_config(
                port=self.port, backends=backends, stats_socket=str(self.run_dir / "haproxy.sock")
            )
        )
        self.haproxy = self._process("haproxy", ["haproxy", "-db", "-f", str(config)])
        wait_for_port("127.0.0.1", self.port, 10, self.haproxy)

    # --- faults and state ------------------------------------------------------------------

    def kill(self, name: str) -> None:
        """SIGKILL a replica or worker host with everything it forked."""
        next(p for p in [*self.web, *self.workers] if p.name == name).kill()

    def stop_host(self, name: str) -> None:
        """Stop a replica or worker host as an operator would (SIGTERM, then the grace)."""
        stop_all([p for p in [*self.web, *self.workers] if p.name == name], STOP_GRACE_SECONDS)

    def disable_web(self, name: str) -> None:
        """Take a replica out of HAProxy's rotation (maintenance), as before an upgrade."""
        self._haproxy_command(f"disable server web/{name}")

    def _haproxy_command(self, command: str) -> str:
        with socket.socket(socket.AF_UNIX) as stats:
            stats.connect(str(self.run_dir / "haproxy.sock"))
            stats.sendall(command.encode() + b"\n")
            data = b""
            while chunk := stats.recv(65536):
                data += chunk
        return data.decode()

    def backend_states(self) -> dict[str, str]:
        """HAProxy's view of each replica: UP, DOWN, ... (from its stats socket)."""
        lines = self._haproxy_command("show stat").splitlines()
        header = lines[0].lstrip("# ").split(",")
        states = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(","), strict=False))
            if row.get("pxname") == "web" and row.get("svname") not in {"FRONTEND", "BACKEND"}:
                states[row["svname"]] = row["status"].split()[0]
        return states

    # --- stopping --------------------------------------------------------------------------

    def stop(self) -> None:
        """Everything this cluster started, in reverse order; safe to call twice."""
        if self.haproxy is not None:
            stop_all([self.haproxy], 5)
            (self.run_dir / "haproxy.sock").unlink(missing_ok=True)  # HAProxy leaves it
        stop_all([*self.web, *self.workers], STOP_GRACE_SECONDS)
        stop_all([p for p in (self.pgbouncer, self.redis) if p is not None], 5)
        if self.network is not None:
            self.network.remove()
            self.network = None


def _unprivileged_user() -> str:
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError("PgBouncer needs an unprivileged user to run as (postgres or nobody)")


def _create_database(database_url: str) -> None:
    import psycopg
    from psycopg import sql

    parts = urlsplit(database_url)
    name = parts.path.lstrip("/")
    admin = urlunsplit((parts.scheme, parts.netloc, "/postgres", "", ""))
    with psycopg.connect(admin, autocommit=True) as connection:
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [name]
        ).fetchone()
        if exists is None:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def tools_missing() -> list[str]:
    return [
        tool
        for tool in ("haproxy", "pgbouncer", "redis-server", "ip")
        if shutil.which(tool) is None
    ]
