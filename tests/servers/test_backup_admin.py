"""Staff's side of backups in the bucket (a real SeaweedFS), and the panel's: deleting a
backup marks it deleting and deletes its object after commit, then the row (the catch-up
finishes one the bucket refused), "Rebuild on another node…" begins a rebuild for servers whose node
is gone (a worker does it: tests/servers/test_backups_in_object_storage.py), and the panel
says where each backup is kept."""

from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.contrib.messages import get_messages
from django.utils import timezone

from audit.actors import Actor
from audit.models import AuditRecord
from servers.backups.jobs import backup_create, job_finish
from servers.backups.object_storage import reset_client
from servers.backups.storage import backup_key
from servers.models import Backup, BackupState, MigrationState, Node, Server, ServerMigration
from servers.recovery import finish_overdue_work
from tests.servers.node_fixtures import online
from tests.servers.seaweedfs import SeaweedFS

ACTOR = Actor.system("test")


def in_the_bucket(server: Server, seaweedfs: SeaweedFS, bucket: str) -> Backup:
    backup, job = backup_create(server=server, actor=ACTOR)
    seaweedfs.write(bucket, backup_key(backup), b"the archive")
    job_finish(job_id=job.id, succeeded=True, size_bytes=11, sha256="ab" * 32)
    return Backup.objects.get(id=backup.id)


@pytest.fixture
def other_node(db: None) -> Node:
    return online("node-2", url="https://127.0.0.1:9", ports="28000-28001")


def lose(node: Node) -> None:
    """The node silent for a minute: unreachable."""
    silent_since = timezone.now() - timedelta(minutes=1)
    Node.objects.filter(id=node.id).update(last_heartbeat_at=silent_since)


def delete_page(client, backup: Backup):
    """Admin's delete, as staff confirm it: a redirect, with no word about the backup (a
    refusal, or "does not exist")."""
    response = client.post(f"/admin/servers/backup/{quote(backup.id)}/delete/", {"post": "yes"})
    said = [str(message) for message in get_messages(response.wsgi_request)]
    assert response.status_code == 302, response.content.decode()[-2000:]
    assert not [message for message in said if backup.id in message], said
    return response


def test_a_deleted_backup_stays_deleting_until_its_object_is_gone(
    staff_client, demo_server, bucket, seaweedfs, django_capture_on_commit_callbacks
):
    backup = in_the_bucket(demo_server, seaweedfs, bucket)

    with django_capture_on_commit_callbacks() as after_commit:
        delete_page(staff_client, backup)

    assert Backup.objects.get(id=backup.id).state == BackupState.DELETING
    assert seaweedfs.keys(bucket) == [backup_key(backup)]
    for callback in after_commit:
        callback()
    assert not Backup.objects.filter(id=backup.id).exists()
    assert seaweedfs.keys(bucket) == []


@pytest.mark.django_db(transaction=True)
def test_deleting_a_backup_in_the_bucket_deletes_its_object_once_committed(
    staff_client, demo_server, bucket, seaweedfs
):
    backup = in_the_bucket(demo_server, seaweedfs, bucket)

    delete_page(staff_client, backup)

    assert not Backup.objects.filter(id=backup.id).exists()
    assert seaweedfs.keys(bucket) == []


def test_deleting_backups_from_the_list_deletes_their_objects(
    staff_client, demo_server, bucket, seaweedfs, django_capture_on_commit_callbacks
):
    backups = [in_the_bucket(demo_server, seaweedfs, bucket) for _ in range(2)]
    body = {"action": "delete_selected", "_selected_action": [b.id for b in backups]}

    with django_capture_on_commit_callbacks(execute=True):
        staff_client.post("/admin/servers/backup/", {**body, "post": "yes"})

    assert not Backup.objects.exists()
    assert seaweedfs.keys(bucket) == []


def test_a_backup_whose_object_the_bucket_refused_is_finished_by_the_catch_up(
    staff_client, demo_server, bucket, seaweedfs, settings, django_capture_on_commit_callbacks
):
    backup = in_the_bucket(demo_server, seaweedfs, bucket)
    settings.BACKUP_S3_SECRET_ACCESS_KEY = "not-the-bucket-secret"
    reset_client()

    with django_capture_on_commit_callbacks(execute=True):
        delete_page(staff_client, backup)

    assert Backup.objects.get(id=backup.id).state == BackupState.DELETING
    assert seaweedfs.keys(bucket) == [backup_key(backup)]
    settings.BACKUP_S3_SECRET_ACCESS_KEY = seaweedfs.settings(bucket)["BACKUP_S3_SECRET_ACCESS_KEY"]
    reset_client()
    finish_overdue_work()
    assert not Backup.objects.filter(id=backup.id).exists()
    assert seaweedfs.keys(bucket) == []


def test_staff_deleting_a_backup_is_audited(staff, staff_client, demo_server, bucket, seaweedfs):
    backup = in_the_bucket(demo_server, seaweedfs, bucket)

    delete_page(staff_client, backup)

    record = AuditRecord.objects.get(action="backup.delete")
    assert (record.actor_email, record.server_id) == (staff.email, demo_server.id)
    assert record.organization_id == demo_server.organization_id


def test_a_backup_being_deleted_is_gone_for_its_customer(
    client, alice, staff_client, demo_server, bucket, seaweedfs
):
    backup = in_the_bucket(demo_server, seaweedfs, bucket)
    delete_page(staff_client, backup)  # in this test's transaction: the object stays
    client.force_login(alice.user)

    html = client.get(f"/panel/servers/{demo_server.id}/backups/").content.decode()

    assert Backup.objects.get(id=backup.id).state == BackupState.DELETING
    assert backup.id not in html


def test_a_backup_being_made_is_not_deleted(staff_client, demo_server, bucket, seaweedfs):
    backup, _job = backup_create(server=demo_server, actor=ACTOR)

    page = staff_client.post(
        f"/admin/servers/backup/{quote(backup.id)}/delete/", {"post": "yes"}, follow=True
    )

    assert Backup.objects.filter(id=backup.id).exists()
    assert "still being made" in page.content.decode()
    assert seaweedfs.uploads(bucket) == [backup_key(backup)]


def rebuild_action(client, server, **fields):
    body = {"action": "rebuild_on_node", "_selected_action": [server.id], **fields}
    return client.post("/admin/servers/server/", body, follow=True)


def test_rebuild_asks_which_node_first(staff_client, demo_server, other_node):
    page = rebuild_action(staff_client, demo_server).content.decode()

    assert "Rebuild on another node" in page and "node-2" in page
    assert not ServerMigration.objects.exists()


def test_the_rebuild_page_says_placement_is_by_free_memory(staff_client, demo_server, other_node):
    page = " ".join(rebuild_action(staff_client, demo_server).content.decode().split())

    assert "the one with the most free memory, then the fewest servers" in page
    assert "free ports" not in page


def test_rebuild_begins_on_the_node_chosen(
    staff_client, demo_server, agent_node, other_node, bucket, seaweedfs
):
    in_the_bucket(demo_server, seaweedfs, bucket)
    lose(agent_node)

    page = rebuild_action(staff_client, demo_server, apply="yes", target=other_node.id)

    migration = ServerMigration.objects.get(server=demo_server)
    assert (migration.state, migration.target_node) == (MigrationState.MIGRATING, other_node)
    assert "rebuilding on node node-2" in page.content.decode()


def test_rebuild_places_the_server_when_staff_pick_no_node(
    staff_client, demo_server, agent_node, other_node, bucket, seaweedfs
):
    in_the_bucket(demo_server, seaweedfs, bucket)
    lose(agent_node)

    rebuild_action(staff_client, demo_server, apply="yes", target="")

    assert ServerMigration.objects.get(server=demo_server).target_node == other_node


def test_rebuild_says_why_it_cannot_begin_without_a_backup_in_the_bucket(
    staff_client, demo_server, agent_node, other_node, bucket
):
    lose(agent_node)
    page = rebuild_action(staff_client, demo_server, apply="yes", target=other_node.id)

    assert "no available backup in object storage" in page.content.decode()
    assert not ServerMigration.objects.exists()


def test_the_panel_says_a_backup_is_kept_in_object_storage(
    client, alice, demo_server, bucket, seaweedfs
):
    in_the_bucket(demo_server, seaweedfs, bucket)
    client.force_login(alice.user)

    html = client.get(f"/panel/servers/{demo_server.id}/backups/").content.decode()

    assert "<td>Object storage</td>" in html
