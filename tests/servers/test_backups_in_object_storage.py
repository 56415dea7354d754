"""Backups off the node: real agents stream their archives to a real SeaweedFS through
presigned URLs, and restores fetch them back from it, on the same node or another one.

PostgreSQL only (the live server's thread and the test write the same rows at once); the
agents run as root, as in production."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from audit.actors import Actor
from servers.agents.rebuild import server_rebuild_begin, server_rebuild_run
from servers.backups.jobs import (
    SILENT_NODE_DEADLINE,
    backup_create,
    backup_restore,
    jobs_fail_unreported,
)
from servers.backups.storage import backup_key
from servers.errors import MigrationRefused
from servers.models import (
    Backup,
    BackupLocation,
    BackupState,
    Job,
    JobState,
    MigrationState,
    Node,
    Server,
    ServerMigration,
    ServerState,
)
from tests.agent.conftest import certificates, games_dir
from tests.agent.lines import wait_until
from tests.processes import unmount_under
from tests.servers.seaweedfs import SeaweedFS
from tests.servers.test_node_migration import Pair, demo_on, migrate, pair, state_of
from tests.webhooks.worker_cluster import ON_POSTGRES

__all__ = ["certificates", "games_dir", "pair"]

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


def test_a_changed_byte_in_the_bucket_is_refused_by_the_restore_and_the_server_stays_as_it_was(
    pair, acme, bucket, seaweedfs: SeaweedFS
):
    a = pair.node("a")
    server = demo_on(a, acme, running=False)  # a running game saves its world when stopped
    backup = back_up(server)
    (world(pair, "a", server) / "notes.txt").write_text("made after the backup\n")
    before = pair.files("a", server)
    stored = bytearray(seaweedfs.read(bucket, backup_key(backup)))
    stored[len(stored) // 2] ^= 0x01
    seaweedfs.write(bucket, backup_key(backup), bytes(stored))

    job = restore(server, backup)

    assert job.state == JobState.FAILED
    assert "SHA-256" in job.error
    assert pair.files("a", server) == before
    assert state_of(server) == ServerState.STOPPED


def big_world(pair: Pair, node: str, server: Server, megabytes: int) -> None:
    with open(world(pair, node, server) / "region.bin", "wb") as region:
        for _ in range(megabytes):
            region.write(os.urandom(1024 * 1024))


def parts_sent(seaweedfs: SeaweedFS, bucket: str, backup: Backup) -> int:
    key = backup_key(backup)
    listed = seaweedfs.client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    uploads = [upload["UploadId"] for upload in listed if upload["Key"] == key]
    if not uploads:
        return 0
    answer = seaweedfs.client.list_parts(Bucket=bucket, Key=key, UploadId=uploads[0])
    return len(answer.get("Parts", []))


def killed_mid_backup(pair: Pair, server: Server, seaweedfs: SeaweedFS, bucket: str) -> Job:
    """A backup whose agent is SIGKILLed once its first part is in the bucket."""
    backup, job = backup_create(server=Server.objects.get(id=server.id), actor=ACTOR)
    wait_until(lambda: parts_sent(seaweedfs, bucket, backup) > 0, timeout=JOB_SECONDS)
    pair.agents["a"].end(signal.SIGKILL)
    return job


def test_an_agent_killed_mid_backup_leaves_no_backup_and_no_half_object(
    pair, acme, bucket, seaweedfs: SeaweedFS
):
    a = pair.node("a")
    server = demo_on(a, acme, running=False)
    big_world(pair, "a", server, 160)
    job = killed_mid_backup(pair, server, seaweedfs, bucket)

    pair.agents["a"].start()  # it finds the job it left and reports it failed
    ended = finished(job)

    assert ended.state == JobState.FAILED
    assert Backup.objects.get(id=ended.backup_id).state == BackupState.FAILED
    assert seaweedfs.uploads(bucket) == [] and seaweedfs.keys(bucket) == []


def test_a_backup_whose_node_goes_silent_is_failed_and_its_upload_aborted(
    pair, acme, bucket, seaweedfs: SeaweedFS
):
    a = pair.node("a")
    server = demo_on(a, acme, running=False)
    big_world(pair, "a", server, 160)
    job = killed_mid_backup(pair, server, seaweedfs, bucket)

    failed = jobs_fail_unreported(timezone.now() + SILENT_NODE_DEADLINE + timedelta(minutes=1))

    assert failed == [job.id]
    assert Backup.objects.get(id=job.backup_id).state == BackupState.FAILED
    assert seaweedfs.uploads(bucket) == [] and seaweedfs.keys(bucket) == []


def gone(pair: Pair, name: str, node: Node) -> None:
    """The node's disk is lost and its agent with it: no heartbeat for a minute."""
    pair.agents[name].end(signal.SIGKILL)
    unmount_under(pair.agents[name].data_dir / "servers")  # each server is a filesystem
    shutil.rmtree(pair.agents[name].data_dir / "servers")
    Node.objects.filter(id=node.id).update(last_heartbeat_at=timezone.now() - timedelta(minutes=1))


def rebuild(server: Server, target: Node | None = None) -> ServerMigration:
    begun = server_rebuild_begin(
        server=Server.objects.get(id=server.id), target=target, actor=ACTOR
    )
    return server_rebuild_run(migration_id=begun.id)


def test_rebuild_brings_the_world_back_on_another_node_after_its_node_is_lost(
    pair, acme, bucket, published
):
    a, b = pair.node("a"), pair.node("b")
    server = demo_on(a, acme, running=True)
    (world(pair, "a", server) / "notes.txt").write_text("the customer's world\n")
    backup = back_up(server)
    before = pair.files("a", server)
    gone(pair, "a", a)

    migration = rebuild(server)

    assert migration.state == MigrationState.COMPLETED, migration.error
    moved = Server.objects.get(id=server.id)
    assert moved.node_id == b.id and moved.address == migration.new_address
    assert pair.files("b", server) == before
    wait_until(lambda: state_of(server) == ServerState.RUNNING, timeout=30)
    migrated = [p.data for p in published if p.event == "server.migrated"]
    assert migrated == [
        {
            "previous_address": server.address,
            "new_address": moved.address,
            "port_changed": moved.port != server.port,
        }
    ]
    assert Backup.objects.get(id=backup.id).state == BackupState.AVAILABLE


def test_rebuild_is_refused_while_the_node_answers(pair, acme, bucket):
    a, b = pair.node("a"), pair.node("b")
    server = demo_on(a, acme, running=False)
    back_up(server)

    with pytest.raises(MigrationRefused, match="answers"):
        rebuild(server, b)


def test_a_rebuild_from_a_changed_object_fails_and_the_server_stays_where_it_was(
    pair, acme, bucket, seaweedfs: SeaweedFS
):
    a, b = pair.node("a"), pair.node("b")
    server = demo_on(a, acme, running=False)
    backup = back_up(server)
    stored = bytearray(seaweedfs.read(bucket, backup_key(backup)))
    stored[-10] ^= 0x01
    seaweedfs.write(bucket, backup_key(backup), bytes(stored))
    gone(pair, "a", a)

    migration = rebuild(server, b)

    assert migration.state == MigrationState.FAILED
    assert "SHA-256" in migration.error
    assert Server.objects.get(id=server.id).node_id == a.id
    assert pair.files("b", server) is None


def test_a_move_between_nodes_goes_through_the_bucket_and_keeps_a_backup_of_it(
    pair, acme, bucket, seaweedfs: SeaweedFS
):
    a, b = pair.node("a"), pair.node("b")
    server = demo_on(a, acme, running=False)
    (world(pair, "a", server) / "notes.txt").write_text("moved through the bucket\n")
    before = pair.files("a", server)

    migration = migrate(server, b)

    assert migration.state == MigrationState.COMPLETED, migration.error
    assert pair.files("b", server) == before and pair.files("a", server) is None
    (kept,) = Backup.objects.filter(server=server)
    assert kept.state == BackupState.AVAILABLE and kept.name == "Moved to b"
    assert seaweedfs.keys(bucket) == [backup_key(kept)]
