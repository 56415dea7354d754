"""Jobs on agent nodes whose node stops reporting: the runtime sweep fails them once the node
has been silent for ten minutes (servers.backups.jobs.SILENT_NODE_DEADLINE)."""

import json
from datetime import timedelta

from django.test import Client
from django.utils import timezone
from freezegun import freeze_time

from audit.actors import Actor
from servers.backups.jobs import backup_create
from servers.models import Backup, BackupState, Job, JobState
from servers.runtime import runtime_sweep

REPORTS = "/internal/nodes/reports"
HEARTBEAT = "/internal/nodes/heartbeat"
START = "2026-11-26 10:00:00"
_seq = iter(range(1, 10_000))


def post(path, body, token):
    return Client().post(
        path, json.dumps(body), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip


def heartbeat(token):
    body = {"agent_version": "1", "outbox_id": "obx_1", "servers": {}}
    assert post(HEARTBEAT, body, token).status_code == 200


def job_report(server, job, token, kind, **fields):
    body = {"outbox_id": "obx_1", "seq": next(_seq), "server_id": server.id, "kind": kind,
            "job_id": job.id, **fields}  # fmt: skip
    return post(REPORTS, body, token)


def sweep():
    runtime_sweep(timezone.now())


def a_backup_job(server, token):
    heartbeat(token)
    _, job = backup_create(server=server, actor=Actor.system("test"))
    assert job_report(server, job, token, "job_progress", progress=10).status_code == 200
    return job


def test_a_job_fails_once_its_node_has_been_silent_for_ten_minutes(demo_server, node_token):
    with freeze_time(START) as frozen:
        job = a_backup_job(demo_server, node_token)
        frozen.tick(timedelta(minutes=10, seconds=1))
        sweep()
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.error == "The node node-1 stopped reporting: no word from it for 10 minutes."
    assert Backup.objects.get(id=job.backup_id).state == BackupState.FAILED


def test_a_job_of_a_node_silent_for_less_than_ten_minutes_keeps_running(demo_server, node_token):
    with freeze_time(START) as frozen:
        job = a_backup_job(demo_server, node_token)
        frozen.tick(timedelta(minutes=9, seconds=59))
        sweep()
    assert Job.objects.get(id=job.id).state == JobState.RUNNING


def test_a_long_job_keeps_running_while_its_node_heartbeats_and_reports(demo_server, node_token):
    with freeze_time(START) as frozen:
        job = a_backup_job(demo_server, node_token)
        for minute in range(1, 31):
            frozen.tick(timedelta(minutes=1))
            heartbeat(node_token)
            job_report(demo_server, job, node_token, "job_progress", progress=minute * 3)
            sweep()
    job.refresh_from_db()
    assert (job.state, job.progress) == (JobState.RUNNING, 90)


def test_a_late_report_of_a_job_failed_this_way_is_acknowledged_and_ignored(
    demo_server, node_token
):
    with freeze_time(START) as frozen:
        job = a_backup_job(demo_server, node_token)
        frozen.tick(timedelta(minutes=11))
        sweep()
        heartbeat(node_token)  # the node is back, with the end of the job in its outbox
        response = job_report(demo_server, job, node_token, "job_finished", succeeded=True,
                              error=None, size_bytes=1234, sha256="ab" * 32)  # fmt: skip
    assert response.status_code == 200
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "stopped reporting" in job.error
    assert Backup.objects.get(id=job.backup_id).state == BackupState.FAILED


def test_the_simulated_nodes_sweep_leaves_an_agent_nodes_job_alone(demo_server, node_token):
    with freeze_time(START) as frozen:
        job = a_backup_job(demo_server, node_token)
        frozen.tick(timedelta(seconds=20))  # past SIMULATED_RUNTIME_DELAY_SECONDS
        sweep()
    assert Job.objects.get(id=job.id).state == JobState.RUNNING
