"""`python -m cluster` (what `make cluster` runs) prints the load balancer's URL, serves on
it, and however it is ended (Ctrl-C, SIGTERM, a closed terminal) stops everything it started:
no process, namespace or bridge is left, and the port is free again."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from cluster.stack import ROOT, free_port
from tests.cluster.conftest import cluster_database_url


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.startswith("gshost-c")}


def processes_of(run_dir: Path, secret_key: str) -> list[int]:
    """Processes started for the cluster: HAProxy, PgBouncer and Redis name its run directory
    in their arguments, the replicas and workers have its secret key in their environment."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            environment = (entry / "environ").read_bytes()
        except OSError:
            continue
        if str(run_dir).encode() in command or f"SECRET_KEY={secret_key}".encode() in environment:
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_it_serves_until_signalled_and_then_leaves_nothing_behind(tmp_path: Path, signum: int):
    port = free_port()
    run_dir = tmp_path / "run"
    before = namespaces()
    env = {
        **os.environ,
        "CLUSTER_PORT": str(port),
        "CLUSTER_RUN_DIR": str(run_dir),
        "CLUSTER_DATABASE_URL": cluster_database_url(),
    }
    cluster = subprocess.Popen(
        [sys.executable, "-m", "cluster"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert cluster.stdout is not None
        first = cluster.stdout.readline()
        assert first.startswith(f"gshost cluster: http://127.0.0.1:{port}"), first
        assert len(namespaces() - before) == 4  # two replicas, two worker hosts
        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
        secret_key = (run_dir / "secret-key").read_text().strip()
        assert len(processes_of(run_dir, secret_key)) >= 7
        cluster.send_signal(signum)
        assert cluster.wait(timeout=60) == 0
    finally:
        if cluster.poll() is None:
            cluster.kill()
    assert namespaces() - before == set()
    assert processes_of(run_dir, secret_key) == []
    assert not (run_dir / "haproxy.sock").exists()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))  # free again
