"""Backups, restores, wipes, reinstalls and settings of servers on agent nodes: what the control
plane asks of the agent (a stand-in over real HTTPS), and how the agent's job reports land."""

import json

import pytest
from django.test import Client
from django.utils import timezone
from freezegun import freeze_time

from audit.actors import Actor
from servers.backups.jobs import backup_create
from servers.game.settings import settings_update
from servers.models import Backup, BackupState, Job, JobState, Node, Server
from servers.services import server_create
from tests.conftest import API, client_for, error_of
from tests.servers.conftest import events_of
from tests.servers.node_fixtures import register

REPORTS = "/internal/nodes/reports"
SHA = "ab" * 32
SCOPES = ["servers:read", "backups:read", "backups:create", "backups:restore",
          "maintenance:execute"]  # fmt: skip


@pytest.fixture
def key(make_key):
    return make_key(SCOPES)


def api_post(key, server, route, body=None):
    return client_for(key).post(f"{API}/servers/{server.id}/{route}", body or {}, format="json")


def api_get(key, path):
    return client_for(key).get(f"{API}/{path}")


_seq = iter(range(1, 10_000))


def report(server, kind, job_id, **fields):
    body = {
        "outbox_id": "obx_" + "1" * 24,
        "seq": next(_seq),
        "server_id": server.id,
        "kind": kind,
        "at": "2026-11-26T10:00:00Z",
        "job_id": job_id,
        **fields,
    }
    return body


def post_report(body, token):
    return Client().post(
        REPORTS, json.dumps(body), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip


def finished(server, job_id, **fields):
    values = {"succeeded": True, "error": None, "size_bytes": 1234, "sha256": SHA, **fields}
    return report(server, "job_finished", job_id, **values)


def made_backup(demo_server, node_token):
    backup, job = backup_create(server=demo_server, actor=Actor.system("test"))
    post_report(finished(demo_server, job.id), node_token)
    return Backup.objects.get(id=backup.id)


# What the control plane asks


def test_a_backup_asks_the_agent_for_a_backup_job(key, demo_server, stand_in_agent):
    response = api_post(key, demo_server, "backups", {"name": "Before the update"})
    assert response.status_code == 202
    body = response.json()
    (call,) = stand_in_agent.calls("POST")
    assert call.path == f"/v1/servers/{demo_server.id}/jobs"
    assert call.body == {
        "job_id": body["job"]["id"],
        "kind": "backup",
        "game": "demo",
        "backup_id": body["backup"]["id"],
    }
    assert body["backup"]["sha256"] is None and body["backup"]["size_bytes"] is None


def test_a_backup_works_while_the_game_runs(key, demo_server, stand_in_agent, put_in_state):
    put_in_state(demo_server, "running")
    assert api_post(key, demo_server, "backups").status_code == 202


def test_a_restore_sends_the_backups_checksum(key, demo_server, stand_in_agent, node_token):
    backup = made_backup(demo_server, node_token)
    response = api_post(key, demo_server, f"backups/{backup.id}/restore")
    assert response.status_code == 202
    call = stand_in_agent.calls("POST")[-1]
    assert call.body == {
        "job_id": response.json()["id"],
        "kind": "restore",
        "game": "demo",
        "backup_id": backup.id,
        "sha256": SHA,
        "disk_mb": 10240,
    }


def test_a_restore_of_a_running_server_is_sent_and_the_server_moves_only_on_reports(
    key, demo_server, stand_in_agent, node_token, put_in_state, published
):
    backup = made_backup(demo_server, node_token)
    put_in_state(demo_server, "running")
    published.clear()
    response = api_post(key, demo_server, f"backups/{backup.id}/restore")
    assert response.status_code == 202
    assert stand_in_agent.calls("POST")[-1].body["kind"] == "restore"
    states = [Server.objects.get(id=demo_server.id).state]
    job_id = response.json()["id"]
    for body in (
        report(demo_server, "stopped_by_node", job_id=None, exit_code=0),
        report(demo_server, "job_progress", job_id, progress=0),
        finished(demo_server, job_id, size_bytes=None, sha256=None),
        report(demo_server, "started_by_node", job_id=None),
        report(demo_server, "ready", job_id=None, pid=4243),
    ):
        assert post_report(body, node_token).status_code == 200
        states.append(Server.objects.get(id=demo_server.id).state)
    assert states == ["running", "stopped", "stopped", "stopped", "starting", "running"]
    assert events_of(published) == ["server.stopped", "server.started"]
    assert Job.objects.get(id=job_id).state == JobState.SUCCEEDED


@pytest.mark.parametrize("action", ["wipe", "reinstall"])
def test_maintenance_asks_the_agent(key, demo_server, stand_in_agent, action):
    Server.objects.filter(id=demo_server.id).update(desired_settings={"difficulty": "hard"})
    response = api_post(key, demo_server, "maintenance", {"action": action})
    assert response.status_code == 202
    call = stand_in_agent.calls("POST")[-1]
    expected = {"job_id": response.json()["id"], "kind": action, "game": "demo"}
    if action == "reinstall":
        expected["settings"] = {
            "motd": "A gshost demo server",
            "max-players": "20",
            "difficulty": "hard",
        }
    assert call.body == expected


def test_an_agent_that_refuses_the_job_is_409_and_the_job_is_kept_failed(
    key, demo_server, stand_in_agent
):
    path = f"/v1/servers/{demo_server.id}/jobs"
    refusal = {"error": {"code": "invalid_state", "message": "a restore job is running"}}
    stand_in_agent.answer("POST", path, 409, refusal)
    response = api_post(key, demo_server, "backups")
    assert response.status_code == 409
    assert "a restore job is running" in error_of(response)["message"]
    job = Job.objects.get()
    assert (job.state, Backup.objects.get().state) == ("failed", "failed")
    assert "a restore job is running" in job.error


def test_a_job_on_an_unreachable_node_is_503_and_nothing_is_kept(
    key, demo_server, agent_node, stand_in_agent
):
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=None)
    response = api_post(key, demo_server, "maintenance", {"action": "wipe"})
    assert response.status_code == 503
    assert error_of(response)["code"] == "node_unavailable"
    assert Job.objects.count() == 0
    assert stand_in_agent.requests == []


# Settings


def test_settings_are_written_on_the_node_and_a_stopped_server_is_in_sync_at_once(
    demo_server, stand_in_agent, alice, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        settings_update(server=demo_server, values={"max-players": "8"}, actor=Actor.system("t"))
    (call,) = stand_in_agent.calls("PUT")
    assert call.path == f"/v1/servers/{demo_server.id}/settings"
    assert call.body["game"] == "demo" and call.body["settings"]["max-players"] == "8"
    reported = Server.objects.get(id=demo_server.id).reported_settings
    assert reported["max-players"] == "8"


def test_settings_of_a_running_server_wait_for_its_next_start(
    demo_server, stand_in_agent, put_in_state, django_capture_on_commit_callbacks
):
    put_in_state(demo_server, "running")
    with django_capture_on_commit_callbacks(execute=True):
        settings_update(server=demo_server, values={"max-players": "8"}, actor=Actor.system("t"))
    assert stand_in_agent.calls("PUT")
    assert Server.objects.get(id=demo_server.id).reported_settings.get("max-players") != "8"


def test_settings_still_change_while_the_node_is_unreachable(demo_server, agent_node):
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=None)
    rows = settings_update(server=demo_server, values={"motd": "Hi"}, actor=Actor.system("t"))
    assert len(rows) == 1
    assert Server.objects.get(id=demo_server.id).desired_settings["motd"] == "Hi"


# Reports of jobs


def test_progress_reports_start_the_job_and_move_its_progress(demo_server, node_token):
    _, job = backup_create(server=demo_server, actor=Actor.system("test"))
    assert post_report(report(demo_server, "job_progress", job.id, progress=0), node_token)
    post_report(report(demo_server, "job_progress", job.id, progress=42), node_token)
    job.refresh_from_db()
    assert (job.state, job.progress) == (JobState.RUNNING, 42)
    assert job.started_at is not None


def test_a_finished_backup_is_available_with_its_size_and_checksum(key, demo_server, node_token):
    _, job = backup_create(server=demo_server, actor=Actor.system("test"))
    response = post_report(finished(demo_server, job.id, size_bytes=987654321), node_token)
    assert response.status_code == 200
    job.refresh_from_db()
    assert (job.state, job.progress) == (JobState.SUCCEEDED, 100)
    listed = api_get(key, f"servers/{demo_server.id}/backups").json()["results"][0]
    assert (listed["state"], listed["size_bytes"], listed["sha256"]) == (
        "available",
        987654321,
        SHA,
    )


def test_a_failed_backup_job_fails_its_backup_with_the_error(demo_server, node_token):
    backup, job = backup_create(server=demo_server, actor=Actor.system("test"))
    body = finished(demo_server, job.id, succeeded=False, error="No space left on device",
                    size_bytes=None, sha256=None)  # fmt: skip
    post_report(body, node_token)
    job.refresh_from_db()
    backup.refresh_from_db()
    assert (job.state, job.error) == (JobState.FAILED, "No space left on device")
    assert (backup.state, backup.size_bytes, backup.sha256) == (BackupState.FAILED, None, "")


def test_a_backup_beyond_the_servers_limit_deletes_the_oldest_and_its_archive_on_the_node(
    demo_server, node_token, stand_in_agent, django_capture_on_commit_callbacks
):
    Server.objects.filter(id=demo_server.id).update(backups_limit=2)
    demo_server.refresh_from_db()
    with freeze_time(timezone.now()) as frozen:
        made = []
        for _ in range(3):
            with django_capture_on_commit_callbacks(execute=True):
                made.append(made_backup(demo_server, node_token))
            frozen.tick(1)
    oldest = made[0]

    kept = Backup.objects.filter(server=demo_server).values_list("id", flat=True)
    assert sorted(kept) == sorted(backup.id for backup in made[1:])
    (removal,) = stand_in_agent.calls("DELETE")
    assert removal.path == f"/v1/servers/{demo_server.id}/backups/{oldest.id}"


def test_a_failed_backup_deletes_none_of_those_kept(demo_server, node_token, stand_in_agent):
    Server.objects.filter(id=demo_server.id).update(backups_limit=1)
    demo_server.refresh_from_db()
    kept = made_backup(demo_server, node_token)
    _, job = backup_create(server=demo_server, actor=Actor.system("test"))

    post_report(finished(demo_server, job.id, succeeded=False, error="No space left"), node_token)

    assert Backup.objects.get(id=kept.id).state == BackupState.AVAILABLE


def test_a_job_report_is_applied_once(demo_server, node_token):
    _, job = backup_create(server=demo_server, actor=Actor.system("test"))
    body = finished(demo_server, job.id)
    post_report(body, node_token)
    Job.objects.filter(id=job.id).update(state=JobState.RUNNING)  # were it applied again...
    assert post_report(body, node_token).json() == {"acknowledged": body["seq"]}
    assert Job.objects.get(id=job.id).state == JobState.RUNNING  # ...it would be succeeded


def test_a_late_progress_report_does_not_reopen_a_finished_job(demo_server, node_token):
    _, job = backup_create(server=demo_server, actor=Actor.system("test"))
    post_report(finished(demo_server, job.id), node_token)
    post_report(report(demo_server, "job_progress", job.id, progress=50), node_token)
    job.refresh_from_db()
    assert (job.state, job.progress) == (JobState.SUCCEEDED, 100)


def test_a_finished_reinstall_marks_the_settings_applied(demo_server, node_token, alice):
    from servers.backups.jobs import maintenance_start
    from servers.models import JobKind

    Server.objects.filter(id=demo_server.id).update(desired_settings={"motd": "Fresh"})
    job = maintenance_start(server=demo_server, kind=JobKind.REINSTALL, actor=Actor.system("t"))
    post_report(finished(demo_server, job.id, size_bytes=None, sha256=None), node_token)
    assert Server.objects.get(id=demo_server.id).reported_settings["motd"] == "Fresh"


def test_a_job_report_naming_another_nodes_job_is_403_and_changes_nothing(
    acme, demo_server, node_token
):
    other_node, _ = register("node-2")
    theirs = server_create(
        actor=Actor.system("test"), organization=acme, name="Theirs", game="demo", node=other_node
    )
    Job.objects.create(server=theirs, kind="wipe")
    their_job = Job.objects.get(server=theirs)
    body = finished(demo_server, their_job.id)  # our server, their job
    response = post_report(body, node_token)
    assert response.status_code == 403
    assert error_of(response)["code"] == "job_not_on_node"
    assert Job.objects.get(id=their_job.id).state == JobState.QUEUED
    assert Node.objects.get(name="node-1").last_report_seq == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"job_id": "bkp_nope"}, "job_id"),
        ({"progress": 101}, "progress"),
        ({"progress": True}, "progress"),
        ({"kind": "job_finished", "succeeded": "yes"}, "succeeded"),
        ({"kind": "job_finished", "succeeded": True, "sha256": "XYZ"}, "sha256"),
        ({"kind": "job_finished", "succeeded": True, "size_bytes": -1}, "size_bytes"),
    ],
)
def test_a_bad_job_report_is_400(demo_server, node_token, change, field):
    _, job = backup_create(server=demo_server, actor=Actor.system("test"))
    body = {**report(demo_server, "job_progress", job.id, progress=5), **change}
    response = post_report(body, node_token)
    assert response.status_code == 400
    assert field in error_of(response)["fields"]


def test_the_agents_own_job_reports_are_accepted_as_they_are_made(demo_server, node_token):
    from gshost_agent.archives import Archived
    from gshost_agent.data_jobs import INTERRUPTED
    from gshost_agent.data_jobs import finished as agent_finished

    _, job = backup_create(server=demo_server, actor=Actor.system("test"))
    made = agent_finished(job.id, archived=Archived(size_bytes=10, sha256=SHA))
    failed = agent_finished(job.id, error=INTERRUPTED)
    for details in (made, failed):
        body = {**report(demo_server, "job_finished", job.id), **details}
        assert post_report(body, node_token).status_code == 200
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
