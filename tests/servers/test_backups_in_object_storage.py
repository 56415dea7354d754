"""Backups off the node: real agents stream their archives to a real SeaweedFS through
presigned URLs, and restores fetch them back from it, on the same node or another one.

PostgreSQL only (the live server's thread and the test write the same rows at once); the
agents run as root, as in production."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from audit.actors import Actor
from servers.backup_storage import backup_key
from servers.jobs import backup_create, backup_restore
from servers.models import Backup, BackupLocation, BackupState, Job, JobState, Node, Server
from tests.agent.conftest import certificates, games_dir
from tests.agent.lines import wait_until
from tests.servers.seaweedfs import SeaweedFS, bucket, seaweedfs
from tests.servers.test_node_migration import Pair, demo_on, migrate, pair
from tests.webhooks.worker_cluster import ON_POSTGRES

__all__ = ["bucket", "certificates", "games_dir", "pair", "seaweedfs"]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(os.geteuid() != 0, reason="the agents run as root, as in production"),
    pytest.mark.skipif(not ON_POSTGRES, reason="the live server needs PostgreSQL"),
]

ACTOR = Actor.system("test")
JOB_SECONDS = 60


def finished(job: Job) -> Job:
    def done() -> Job | None:
        current = Job.objects.get(id=job.id)
        return current if current.state in (JobState.SUCCEEDED, JobState.FAILED) else None

    found: Job = wait_until(done, timeout=JOB_SECONDS)
    return found


def back_up(server: Server) -> Backup:
    backup, job = backup_create(server=Server.objects.get(id=server.id), actor=ACTOR)
    ended = finished(job)
    assert ended.state == JobState.SUCCEEDED, ended.error
    return Backup.objects.get(id=backup.id)


def restore(server: Server, backup: Backup) -> Job:
    job = backup_restore(server=Server.objects.get(id=server.id), backup=backup, actor=ACTOR)
    return finished(job)


def world(pair: Pair, node: str, server: Server) -> Path:
    return pair.agents[node].data_dir / "servers" / server.id


def test_a_backup_is_streamed_to_the_bucket_and_restored_from_it_on_the_same_node(
    pair, acme, bucket, seaweedfs: SeaweedFS
):
    a = pair.node("a")
    server = demo_on(a, acme, running=False)
    (world(pair, "a", server) / "region.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    before = pair.files("a", server)

    backup = back_up(server)

    assert backup.state == BackupState.AVAILABLE
    assert backup.location == BackupLocation.OBJECT_STORAGE
    stored = seaweedfs.read(bucket, backup_key(backup))
    assert len(stored) == backup.size_bytes
    assert hashlib.sha256(stored).hexdigest() == backup.sha256
    assert seaweedfs.uploads(bucket) == []
    assert not (pair.agents["a"].data_dir / "backups" / server.id).exists()

    (world(pair, "a", server) / "region.bin").write_bytes(b"changed since")
    (world(pair, "a", server) / "new.txt").write_text("made after the backup\n")
    job = restore(server, backup)

    assert job.state == JobState.SUCCEEDED, job.error
    assert pair.files("a", server) == before


def test_a_backup_made_on_one_node_is_restored_on_another(pair, acme, bucket):
    a, b = pair.node("a"), pair.node("b")
    server = demo_on(a, acme, running=False)
    (world(pair, "a", server) / "notes.txt").write_text("as backed up\n")
    before = pair.files("a", server)
    backup = back_up(server)
    (world(pair, "a", server) / "notes.txt").write_text("changed on a, then moved\n")
    assert migrate(server, b).error == ""
    assert Server.objects.get(id=server.id).node_id == b.id

    job = restore(server, backup)

    assert job.state == JobState.SUCCEEDED, job.error
    assert pair.files("b", server) == before


def node_of(server: Server) -> Node:
    return Server.objects.select_related("node").get(id=server.id).node
