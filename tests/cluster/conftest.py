"""The cluster's fault tests: a real cluster (HAProxy, PgBouncer, replicas and worker hosts in
network namespaces, a Redis of its own) per test, on a PostgreSQL database of their own.

They run only with GSHOST_CLUSTER_TESTS=1 (`make test-cluster`): they need root, Debian's
HAProxy and PgBouncer, and PostgreSQL (DATABASE_URL), and take minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import requests

from cluster.network import MACHINE_NAME
from cluster.stack import ROOT, Cluster, ClusterSettings, tools_missing
from tests.webhooks.receiver import HttpsReceiver

ENABLED = os.environ.get("GSHOST_CLUSTER_TESTS") == "1"
API = "/api/public/v1"
REQUEST_TIMEOUT = 15.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if ENABLED:
        return
    skip = pytest.mark.skip(
        reason="a real cluster per test (root, HAProxy, PgBouncer, PostgreSQL): "
        "run with `make test-cluster` (GSHOST_CLUSTER_TESTS=1)"
    )
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(skip)


def cluster_database_url() -> str:
    given = os.environ.get("DATABASE_URL", "")
    assert given.startswith("postgres"), "the cluster tests need DATABASE_URL=postgres://..."
    parts = urlsplit(given)
    return urlunsplit((parts.scheme, parts.netloc, parts.path + "_cluster_faults", "", ""))


@dataclass
class Seeded:
    organization_id: str
    keys: list[str]
    servers: list[str]
    webhook_id: str

    @classmethod
    def of(cls, made: dict[str, Any]) -> Seeded:
        webhook = made.get("webhook") or {}
        return cls(
            made["organization_id"], made["keys"], made.get("servers", []), webhook.get("id", "")
        )


class RunningCluster:
    """A started cluster with the test's helpers: seeding, API calls and the database."""

    def __init__(self, cluster: Cluster, receiver: HttpsReceiver) -> None:
        self.cluster = cluster
        self.receiver = receiver

    @property
    def url(self) -> str:
        return self.cluster.url

    def run(self, *argv: str) -> Any:
        """A command of the project against the cluster's database; its JSON output."""
        return self.finish(self.start(*argv))

    def start(self, *argv: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, *argv],
            cwd=ROOT,
            env=self.cluster.command_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(self, command: subprocess.Popen[str]) -> Any:
        stdout, stderr = command.communicate(timeout=300)
        assert command.returncode == 0, stderr
        return json.loads(stdout)

    def seed(self, *, keys: int = 1, servers: int = 0, webhook: bool = False) -> Seeded:
        argv = ["-m", "cluster.seed", "--organization", f"o{uuid.uuid4().hex[:12]}"]
        argv += ["--keys", str(keys), "--servers", str(servers)]
        if webhook:
            argv += ["--webhook-url", self.receiver.url(host=MACHINE_NAME)]
        return Seeded.of(self.run(*argv))

    def session(self, key: str) -> requests.Session:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {key}"
        return session

    def query(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.cluster.settings.database_url, autocommit=True) as connection:
            return connection.execute(sql, params).fetchall()  # type: ignore[arg-type]


@pytest.fixture
def running_cluster(tmp_path: Path) -> Iterator[RunningCluster]:
    assert os.geteuid() == 0, "the cluster tests make network namespaces: run them as root"
    assert not tools_missing(), f"missing {tools_missing()}: scripts/ensure-cluster-tools.sh"
    settings = ClusterSettings(
        database_url=cluster_database_url(),
        run_dir=tmp_path / "cluster",
        env={
            "API_RATE_DEFAULT": "100000/min",
            "API_RATE_REALTIME": "100000/min",
            "WEBHOOKS_PER_ORGANIZATION": "100000",
            "WEBHOOK_ALLOWED_NETWORKS": "10.210.0.0/16",
            "SIMULATED_RUNTIME_DELAY_SECONDS": "0.5",
        },
    )
    cluster = Cluster(settings)
    gateway = cluster.create_network()
    receiver = HttpsReceiver(names=(MACHINE_NAME,), bind=gateway)
    settings.env = {**settings.env, "WEBHOOK_CA_BUNDLE": receiver.ca_pem_path}
    receiver.start()
    try:
        cluster.start()
        yield RunningCluster(cluster, receiver)
    finally:
        cluster.stop()
        receiver.stop()
