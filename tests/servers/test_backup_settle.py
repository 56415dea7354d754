"""How the control plane settles a backup's upload when the node reports the job's end (a real
SeaweedFS; the node is the HTTPS stand-in, whose parts this test sends itself)."""

import hashlib

import requests

from audit.actors import Actor
from servers.backups.jobs import backup_create
from servers.backups.storage import backup_key, backup_part_urls, backup_upload_settle
from servers.models import Backup, BackupState, Job, JobState
from tests.servers.test_agent_jobs import finished, post_report

ARCHIVE = b"an archive of the world, sent as one part"


def sent(demo_server, agent_node, parts: list[bytes]):
    """A backup whose parts the 'node' has sent; its job."""
    backup, job = backup_create(server=demo_server, actor=Actor.system("test"))
    urls = backup_part_urls(node=agent_node, backup_id=backup.id, first=1, count=len(parts))
    for url, part in zip(urls, parts, strict=True):
        assert requests.put(url, data=part, timeout=30).status_code == 200
    return backup, job


def report_end(demo_server, job, node_token, **fields):
    values = {"size_bytes": len(ARCHIVE), "sha256": hashlib.sha256(ARCHIVE).hexdigest(), **fields}
    return post_report(finished(demo_server, job.id, **values), node_token)


def test_a_reported_backup_is_completed_into_one_object_and_made_available(
    bucket, seaweedfs, demo_server, agent_node, node_token
):
    backup, job = sent(demo_server, agent_node, [ARCHIVE])

    assert report_end(demo_server, job, node_token).status_code == 200

    assert Backup.objects.get(id=backup.id).state == BackupState.AVAILABLE
    assert seaweedfs.read(bucket, backup_key(backup)) == ARCHIVE
    assert seaweedfs.uploads(bucket) == []


def test_parts_that_do_not_add_up_to_the_reported_size_fail_the_backup_and_leave_nothing(
    bucket, seaweedfs, demo_server, agent_node, node_token
):
    backup, job = sent(demo_server, agent_node, [ARCHIVE[:10]])

    report_end(demo_server, job, node_token)

    failed = Job.objects.get(id=job.id)
    assert failed.state == JobState.FAILED
    assert "could not be stored" in failed.error
    assert Backup.objects.get(id=backup.id).state == BackupState.FAILED
    assert seaweedfs.uploads(bucket) == [] and seaweedfs.keys(bucket) == []


def test_a_failed_job_aborts_its_upload(bucket, seaweedfs, demo_server, agent_node, node_token):
    backup, job = sent(demo_server, agent_node, [ARCHIVE])

    report_end(demo_server, job, node_token, succeeded=False, error="disk", size_bytes=None,
               sha256=None)  # fmt: skip

    assert Backup.objects.get(id=backup.id).state == BackupState.FAILED
    assert seaweedfs.uploads(bucket) == [] and seaweedfs.keys(bucket) == []


def test_a_report_that_comes_again_after_the_upload_was_completed_still_makes_it_available(
    bucket, seaweedfs, demo_server, agent_node, node_token
):
    backup, job = sent(demo_server, agent_node, [ARCHIVE])
    first = backup_upload_settle(
        node=agent_node, job_id=job.id, succeeded=True, error="", size_bytes=len(ARCHIVE)
    )  # completed, then the recording failed: the node sends its report again

    report_end(demo_server, job, node_token)

    assert first.completed
    assert Backup.objects.get(id=backup.id).state == BackupState.AVAILABLE
    assert seaweedfs.read(bucket, backup_key(backup)) == ARCHIVE
