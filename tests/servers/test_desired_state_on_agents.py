"""Suspension, deletion and reinstall of servers on real agents, whose reports reach the control
plane served by the test (live_server): recorded at once, carried out when the node answers.

PostgreSQL only, as tests/servers/test_node_migration.py (whose two-agent rig this reuses); the
agents run as root, as in production."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import timedelta

import psutil
import pytest
from django.utils import timezone

from audit.actors import Actor
from servers import recovery
from servers.backups.storage import backup_key
from servers.desired import server_converge
from servers.models import Backup, BackupState, Job, JobKind, JobState, Node, Server, ServerState
from servers.services import server_delete_request, server_reinstall_request, server_suspend
from tests.agent.conftest import certificates, games_dir
from tests.agent.lines import wait_until
from tests.servers.test_backups_in_object_storage import back_up, world
from tests.servers.test_node_migration import demo_on, pair, state_of
from tests.webhooks.worker_cluster import ON_POSTGRES

__all__ = ["certificates", "games_dir", "pair"]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(os.geteuid() != 0, reason="the agents run as root, as in production"),
    pytest.mark.skipif(not ON_POSTGRES, reason="the live server needs PostgreSQL"),
]

BILLING = Actor.system("billing")
WITHIN_SECONDS = 60  # a suspended game is stopped within 60 s of its node answering again


@pytest.fixture
def catch_up() -> Iterator[None]:
    """The worker's catch-up thread, as every worker process runs it (servers.recovery)."""
    recovery.start_catch_up()
    yield
    recovery.stop_catch_up()


def converged(server: Server) -> bool:
    return server_converge(server_id=server.id)


def test_a_suspension_made_while_the_agent_is_down_stops_the_game_once_it_is_back(
    pair, acme, catch_up
):
    a = pair.node("a")
    server = demo_on(a, acme, running=True)
    agent = pair.agents["a"]
    game = psutil.Process(agent.game_pid(server.id))
    agent.end(signal.SIGKILL)  # its games keep running
    Node.objects.filter(id=a.id).update(last_heartbeat_at=timezone.now() - timedelta(minutes=1))

    suspended = server_suspend(server=server, actor=BILLING)

    assert suspended.suspended
    assert not converged(server) and state_of(server) == ServerState.RUNNING
    assert game.is_running()
    agent.start()
    wait_until(lambda: state_of(server) == ServerState.STOPPED, timeout=WITHIN_SECONDS)
    wait_until(lambda: not game.is_running(), timeout=10)


def test_a_deleted_server_leaves_no_directory_and_no_backup_in_the_bucket(
    pair, acme, bucket, seaweedfs
):
    a = pair.node("a")
    server = demo_on(a, acme, running=True)
    backup = back_up(server)
    assert seaweedfs.keys(bucket) == [backup_key(backup)]

    server_delete_request(server=Server.objects.get(id=server.id), actor=BILLING)
    wait_until(lambda: converged(server), timeout=WITHIN_SECONDS)

    assert not Server.objects.filter(id=server.id).exists()
    assert not Backup.objects.filter(id=backup.id).exists()
    assert seaweedfs.keys(bucket) == []
    assert not world(pair, "a", server).exists()
    assert not pair.agents["a"].run_dir(server.id).exists()


def test_a_reinstall_empties_the_directory_and_keeps_the_backups(pair, acme):
    a = pair.node("a")
    server = demo_on(a, acme, running=True)
    (world(pair, "a", server) / "notes.txt").write_text("the customer's own\n")
    backup = back_up(server)  # on the node: no bucket here

    server_reinstall_request(server=Server.objects.get(id=server.id), actor=BILLING)
    wait_until(lambda: converged(server), timeout=WITHIN_SECONDS)
    job = Job.objects.get(server=server, kind=JobKind.REINSTALL)
    wait_until(lambda: Job.objects.get(id=job.id).finished, timeout=WITHIN_SECONDS)

    assert Job.objects.get(id=job.id).state == JobState.SUCCEEDED
    assert state_of(server) == ServerState.STOPPED
    assert os.listdir(world(pair, "a", server)) == []
    assert Backup.objects.get(id=backup.id).state == BackupState.AVAILABLE
    archive = pair.agents["a"].data_dir / "backups" / server.id / f"{backup.id}.tar.gz"
    assert archive.is_file()
