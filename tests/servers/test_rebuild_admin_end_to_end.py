"""Staff rebuild a server whose node is gone the way they would: its agent stopped and its data
removed, they select the server in the admin's changelist, run "Rebuild on another node…",
and submit its page as it is shown. A real `qcluster` worker runs the rebuild, real agents
hold the nodes, a real SeaweedFS the backup. PostgreSQL and Redis only (the worker)."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from servers.models import Node, Server, ServerState
from tests.admin_forms import submitted
from tests.agent.conftest import certificates, games_dir
from tests.agent.lines import wait_until
from tests.processes import unmount_under
from tests.servers.seaweedfs import SeaweedFS
from tests.servers.test_backups_in_object_storage import back_up, pytestmark, world
from tests.servers.test_node_migration import Pair, demo_on, pair, state_of
from tests.webhooks.receiver import HttpsReceiver
from tests.webhooks.worker_cluster import (
    needs_postgres_and_redis,
    purge_queued_tasks,
    start_cluster,
    stop_cluster,
)

__all__ = ["certificates", "games_dir", "pair", "pytestmark"]
pytestmark = [*pytestmark, needs_postgres_and_redis]

CHANGELIST = "/admin/servers/server/"
REBUILD_SECONDS = 180


@pytest.fixture
def worker(bucket: str, seaweedfs: SeaweedFS, tmp_path: Path) -> Iterator[Any]:
    purge_queued_tasks()
    with HttpsReceiver() as receiver:
        process = start_cluster(
            receiver, tmp_path / "qcluster.log", Q_WORKERS="1", **seaweedfs.settings(bucket)
        )
        yield process
        stop_cluster(process)


def stopped_and_wiped(pair: Pair, name: str) -> None:
    """The node is gone: its agent stopped, its data removed (its heartbeats stop)."""
    pair.agents[name].end(signal.SIGTERM)
    unmount_under(pair.agents[name].data_dir / "servers")  # each server is a filesystem
    shutil.rmtree(pair.agents[name].data_dir / "servers")


def test_staff_rebuild_a_server_of_a_lost_node_on_another_through_the_admin(
    pair: Pair, acme: Any, bucket: str, worker: Any, staff_client: Client
) -> None:
    a, b = pair.node("a"), pair.node("b")
    server = demo_on(a, acme, running=True)
    (world(pair, "a", server) / "notes.txt").write_text("the customer's world\n")
    back_up(server)
    before = pair.files("a", server)
    stopped_and_wiped(pair, "a")

    listed = staff_client.get(CHANGELIST).content.decode()
    assert server.id in listed and 'value="rebuild_on_node"' in listed
    chosen = {"action": "rebuild_on_node", "_selected_action": [server.id], "index": "0"}
    page = staff_client.post(CHANGELIST, chosen).content.decode()
    assert "Rebuild on another node" in page
    staff_client.post(CHANGELIST, submitted(page, '<form method="post">'), follow=True)

    def moved() -> Server | None:
        current = Server.objects.get(id=server.id)
        return current if current.node_id == b.id else None

    wait_until(moved, timeout=REBUILD_SECONDS, interval=0.5)
    assert pair.files("b", server) == before
    wait_until(lambda: state_of(server) == ServerState.RUNNING, timeout=30)
    assert Node.objects.get(id=a.id).servers.count() == 0
