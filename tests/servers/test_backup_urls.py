"""What the control plane hands a node for a backup in the bucket (a real SeaweedFS that checks
every signature): presigned URLs that open one object each, for a while only, and only to the
node that makes the backup. The node here is the HTTPS stand-in agent."""

import json
from datetime import timedelta

import pytest
import requests
from django.test import Client
from django.utils import timezone
from freezegun import freeze_time

from audit.actors import Actor
from servers.backups.jobs import backup_create, job_finish
from servers.backups.object_storage import (
    GET_URL_SECONDS,
    PART_URL_SECONDS,
    part_urls,
    uploads_in_progress,
)
from servers.backups.storage import backup_download_url, backup_key
from servers.errors import NodeRefused
from servers.models import Backup, BackupLocation, BackupState, Server
from servers.services import server_create
from tests.servers.node_fixtures import beat, register
from tests.servers.seaweedfs import SeaweedFS

PARTS = "/internal/nodes/backup-parts"
ACTOR = Actor.system("test")
MIB = 1024 * 1024


def ask_for_parts(token: str, backup: Backup, first: int = 1, count: int = 2) -> requests.Response:
    body = {"backup_id": backup.id, "first": first, "count": count}
    return Client().post(
        PARTS, json.dumps(body), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip


def new_backup(server: Server) -> Backup:
    backup, _job = backup_create(server=server, actor=ACTOR)
    return backup


def available_backup(server: Server, seaweedfs: SeaweedFS, bucket: str, data: bytes) -> Backup:
    """A finished backup in the bucket, its object written as given."""
    backup, job = backup_create(server=server, actor=ACTOR)
    seaweedfs.write(bucket, backup_key(backup), data)
    job_finish(job_id=job.id, succeeded=True, size_bytes=len(data), sha256="ab" * 32)
    return Backup.objects.get(id=backup.id)


def test_it_gives_the_node_making_a_backup_urls_that_take_its_parts(
    bucket, demo_server, node_token
):
    backup = new_backup(demo_server)

    answer = ask_for_parts(node_token, backup)

    assert backup.location == BackupLocation.OBJECT_STORAGE
    assert answer.status_code == 200
    first, second = answer.json()["urls"]
    assert requests.put(first, data=b"1" * (5 * MIB), timeout=30).status_code == 200
    assert requests.put(second, data=b"2" * 100, timeout=30).status_code == 200


def test_a_part_url_opens_no_other_object(bucket, demo_server, node_token):
    backup, other = new_backup(demo_server), Backup.objects.create(server=demo_server)
    (url,) = ask_for_parts(node_token, backup, count=1).json()["urls"]

    elsewhere = url.replace(backup.id, other.id)

    assert elsewhere != url
    assert requests.put(elsewhere, data=b"x", timeout=30).status_code == 403


def test_a_part_url_expires(bucket, demo_server):
    key = backup_key(new_backup(demo_server))
    (upload_id,) = uploads_in_progress(key)
    with freeze_time(timezone.now() - timedelta(seconds=PART_URL_SECONDS + 60)):
        (url,) = part_urls(key, upload_id, 1, 1)  # signed then: it has just expired

    assert requests.put(url, data=b"x", timeout=30).status_code == 403


def test_another_node_gets_no_url_of_the_backup(bucket, demo_server, node_token):
    backup = new_backup(demo_server)
    other, other_token = register("node-2")
    beat(other)

    answer = ask_for_parts(other_token, backup)

    assert answer.status_code == 404
    assert "urls" not in answer.json()


def test_a_finished_backup_gets_no_more_part_urls(bucket, seaweedfs, demo_server, node_token):
    backup = available_backup(demo_server, seaweedfs, bucket, b"archive")

    assert ask_for_parts(node_token, backup).status_code == 404


@pytest.mark.parametrize("body", [{"first": 0}, {"first": 10_001}, {"count": 65}, {"count": 0}])
def test_part_numbers_out_of_range_are_refused(bucket, demo_server, node_token, body):
    backup = new_backup(demo_server)
    given = {"backup_id": backup.id, "first": 1, "count": 2, **body}

    answer = Client().post(
        PARTS, json.dumps(given), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {node_token}",
    )  # fmt: skip

    assert answer.status_code == 400


def test_a_download_url_reads_the_backups_object_only(bucket, seaweedfs, demo_server):
    backup = available_backup(demo_server, seaweedfs, bucket, b"the archive")
    other = available_backup(demo_server, seaweedfs, bucket, b"another archive")
    url = backup_download_url(backup)

    assert requests.get(url, timeout=30).content == b"the archive"
    assert requests.get(url.replace(backup.id, other.id), timeout=30).status_code == 403
    assert requests.put(url, data=b"overwritten", timeout=30).status_code == 403
    assert seaweedfs.read(bucket, backup_key(backup)) == b"the archive"


def test_a_download_url_expires(bucket, seaweedfs, demo_server):
    backup = available_backup(demo_server, seaweedfs, bucket, b"the archive")
    with freeze_time(timezone.now() - timedelta(seconds=GET_URL_SECONDS + 60)):
        url = backup_download_url(backup)

    assert requests.get(url, timeout=30).status_code == 403


def test_a_backup_on_the_simulated_node_stays_there(bucket, acme):
    server = server_create(
        actor=Actor.system("test"), organization=acme, name="Sim", game="minecraft"
    )

    assert new_backup(server).location == BackupLocation.NODE


def test_a_backup_job_tells_the_agent_to_stream_to_the_bucket(
    bucket, demo_server, stand_in_agent, seaweedfs
):
    backup = new_backup(demo_server)

    (call,) = stand_in_agent.calls("POST")
    assert call.body["storage"] == "object_storage"
    assert call.body["backup_id"] == backup.id
    assert seaweedfs.uploads(bucket) == [backup_key(backup)]


def test_a_backup_the_agent_refuses_fails_and_leaves_no_upload(
    bucket, demo_server, stand_in_agent, seaweedfs
):
    path = f"/v1/servers/{demo_server.id}/jobs"
    stand_in_agent.answer("POST", path, 409, {"error": {"code": "busy", "message": "A job runs."}})

    with pytest.raises(NodeRefused, match="refused"):
        new_backup(demo_server)

    assert seaweedfs.uploads(bucket) == []
    assert list(Backup.objects.values_list("state", flat=True)) == [BackupState.FAILED]
