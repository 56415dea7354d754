"""Placements made at the same moment from several processes never over-commit a node: each
`createserver` re-checks its node's room under the node's row lock (PostgreSQL)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.db.models import Sum

from servers.models import Node, Server
from tests.servers.node_fixtures import online
from tests.webhooks.worker_cluster import ON_POSTGRES

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 6
CALLS_EACH = 4
NODES = 3
NODE_MEMORY_MB = 4096
PLAN_MEMORY_MB = 1024

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not ON_POSTGRES, reason="several processes share a PostgreSQL database"),
]


def database_environment() -> dict[str, str]:
    """The environment of a process that works on this test's database (committed to)."""
    db = connection.settings_dict
    url = (
        f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}"
    )
    return {**os.environ, "DATABASE_URL": url, "SECRET_KEY": settings.SECRET_KEY}


def test_parallel_createserver_calls_never_over_commit_a_node(acme):
    for n in range(NODES):
        online(f"node-{n}", memory=NODE_MEMORY_MB)
    start_at = time.time() + 4  # every process has set Django up by then
    args = [str(start_at), str(CALLS_EACH), "--game", "demo", "--memory", str(PLAN_MEMORY_MB)]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.servers.parallel_createserver", *args],
            cwd=ROOT,
            env=database_environment(),
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    lines = [line for output in outputs for line in output.splitlines()]

    fits = NODES * NODE_MEMORY_MB // PLAN_MEMORY_MB
    placed = [line for line in lines if line.startswith("ok ")]
    refused = [line for line in lines if line.startswith("refused ")]
    assert (len(placed), len(refused)) == (fits, PROCESSES * CALLS_EACH - fits)
    assert all("memory is short on" in line for line in refused)
    committed = Node.objects.filter(name__startswith="node-").annotate(
        memory=Sum("servers__memory_mb")
    )
    assert {node.memory for node in committed} == {NODE_MEMORY_MB}
    assert Server.objects.count() == fits
