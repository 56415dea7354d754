"""Backups, restores, wipes and reinstalls: jobs driven by the runtime; no event for any."""

import re

import pytest
from django.utils import timezone
from freezegun import freeze_time

from audit.actors import Actor
from servers.backups.jobs import backup_create, maintenance_start
from servers.errors import NotAMaintenanceAction
from servers.models import Backup, Job, JobKind, Server
from servers.runtime import runtime_sweep
from tests.conftest import API, client_for, error_of

JOB_FIELDS = {"id", "kind", "state", "progress", "server_id", "created_at", "finished_at", "error"}


def make_backup(client, server):
    return client.post(f"{API}/servers/{server.id}/backups", {}, format="json")


def sweep():
    runtime_sweep(timezone.now())


@pytest.fixture
def available_backup(acme_server):
    with freeze_time(timezone.now()) as frozen:
        backup, _job = backup_create(server=acme_server, actor=Actor.system("test"))
        frozen.tick(5)
        sweep()
    backup.refresh_from_db()
    return backup


def test_it_starts_a_backup_and_answers_202_with_backup_and_job(make_key, acme_server):
    response = make_backup(client_for(make_key(["backups:create"])), acme_server)
    assert response.status_code == 202
    body = response.json()
    assert set(body) == {"backup", "job"}
    assert set(body["job"]) == JOB_FIELDS
    assert re.fullmatch(r"job_[0-9A-Za-z]{16,}", body["job"]["id"])
    assert re.fullmatch(r"bkp_[0-9A-Za-z]{16,}", body["backup"]["id"])
    assert body["job"]["kind"] == "backup"
    assert (body["job"]["state"], body["job"]["progress"]) == ("queued", 0)
    assert (body["job"]["finished_at"], body["job"]["error"]) == (None, None)
    assert body["backup"]["state"] == "creating"


def test_the_runtime_drives_a_job_from_queued_to_succeeded(make_key, acme_server, settings):
    settings.SIMULATED_RUNTIME_DELAY_SECONDS = 2
    client = client_for(make_key(["backups:create", "backups:read"]))
    with freeze_time("2026-11-22 10:00:00") as frozen:
        job_id = make_backup(client, acme_server).json()["job"]["id"]
        sweep()
        assert client.get(f"{API}/jobs/{job_id}").json()["state"] == "running"
        frozen.tick(1)
        sweep()
        assert client.get(f"{API}/jobs/{job_id}").json()["progress"] == 50
        frozen.tick(1)
        sweep()
        job = client.get(f"{API}/jobs/{job_id}").json()
    assert (job["state"], job["progress"]) == ("succeeded", 100)
    assert job["finished_at"] == "2026-11-22T10:00:02.000Z"


def test_a_finished_backup_job_makes_the_backup_available(available_backup):
    assert available_backup.state == "available"
    assert available_backup.size_bytes > 0
    assert available_backup.completed_at is not None


def test_it_lists_backups_newest_first(make_key, acme_server):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        first, _ = backup_create(server=acme_server, actor=Actor.system("test"))
        frozen.tick(1)
        second, _ = backup_create(server=acme_server, actor=Actor.system("test"))
    response = client_for(make_key(["backups:read"])).get(f"{API}/servers/{acme_server.id}/backups")
    body = response.json()
    assert [b["id"] for b in body["results"]] == [second.id, first.id]
    assert set(body["results"][0]) == {
        "id", "server_id", "name", "state", "size_bytes", "sha256", "location", "created_at",
        "completed_at",
    }  # fmt: skip
    assert body["results"][0]["location"] == "node"


def test_listing_backups_needs_backups_read(make_key, acme_server):
    response = client_for(make_key(["backups:create"])).get(
        f"{API}/servers/{acme_server.id}/backups"
    )
    assert error_of(response)["required_scope"] == "backups:read"


def test_it_restores_an_available_backup_on_a_stopped_server(
    make_key, acme_server, available_backup
):
    key = make_key(["backups:restore", "backups:read"])
    response = client_for(key).post(
        f"{API}/servers/{acme_server.id}/backups/{available_backup.id}/restore"
    )
    assert response.status_code == 202
    job = response.json()
    assert (job["kind"], job["state"], set(job)) == ("restore", "queued", JOB_FIELDS)
    polled = client_for(key).get(f"{API}/servers/{acme_server.id}/backups/restore-jobs/{job['id']}")
    assert polled.status_code == 200 and polled.json()["id"] == job["id"]


def test_a_restore_on_a_server_on_its_way_up_is_409(
    make_key, acme_server, available_backup, put_in_state
):
    put_in_state(acme_server, "starting")
    response = client_for(make_key(["backups:restore"])).post(
        f"{API}/servers/{acme_server.id}/backups/{available_backup.id}/restore"
    )
    assert response.status_code == 409
    assert error_of(response)["state"] == "starting"


def test_a_restore_of_a_running_server_stops_it_restores_and_starts_it_again(
    make_key, acme_server, available_backup, put_in_state, published
):
    put_in_state(acme_server, "running")
    published.clear()
    client = client_for(make_key(["backups:restore", "backups:read", "servers:read"]))
    with freeze_time(timezone.now()) as frozen:
        response = client.post(
            f"{API}/servers/{acme_server.id}/backups/{available_backup.id}/restore"
        )
        assert response.status_code == 202
        states = [client.get(f"{API}/servers/{acme_server.id}").json()["state"]]
        for _ in range(2):
            frozen.tick(3)
            sweep()
            states.append(client.get(f"{API}/servers/{acme_server.id}").json()["state"])
    job = client.get(f"{API}/servers/{acme_server.id}/backups/restore-jobs/{response.json()['id']}")
    assert job.json()["state"] == "succeeded"
    assert states == ["stopped", "starting", "running"]
    assert [(p.event, p.data["previous_state"]) for p in published] == [
        ("server.stopped", "stopping"),
        ("server.started", "starting"),
    ]


def test_a_restore_of_a_stopped_server_leaves_it_stopped(
    make_key, acme_server, available_backup, published
):
    with freeze_time(timezone.now()) as frozen:
        client_for(make_key(["backups:restore"])).post(
            f"{API}/servers/{acme_server.id}/backups/{available_backup.id}/restore"
        )
        for _ in range(2):
            frozen.tick(3)
            sweep()
    assert Job.objects.get(kind="restore").state == "succeeded"
    assert Server.objects.get(id=acme_server.id).state == "stopped"
    assert published == []


def test_a_backup_still_being_made_cannot_be_restored(make_key, acme_server):
    backup, _job = backup_create(server=acme_server, actor=Actor.system("test"))
    response = client_for(make_key(["backups:restore"])).post(
        f"{API}/servers/{acme_server.id}/backups/{backup.id}/restore"
    )
    assert response.status_code == 409


def test_an_unknown_backup_is_404_not_found(make_key, acme_server):
    response = client_for(make_key(["backups:restore"])).post(
        f"{API}/servers/{acme_server.id}/backups/bkp_nope00000000000000/restore"
    )
    assert (response.status_code, error_of(response)["code"]) == (404, "not_found")


def test_another_servers_backup_is_not_found(make_key, acme_other_server, available_backup):
    response = client_for(make_key(["backups:restore"])).post(
        f"{API}/servers/{acme_other_server.id}/backups/{available_backup.id}/restore"
    )
    assert response.status_code == 404


def test_a_backup_job_is_not_a_restore_job(make_key, acme_server):
    _backup, job = backup_create(server=acme_server, actor=Actor.system("test"))
    response = client_for(make_key(["backups:read"])).get(
        f"{API}/servers/{acme_server.id}/backups/restore-jobs/{job.id}"
    )
    assert (response.status_code, error_of(response)["code"]) == (404, "not_found")


@pytest.mark.parametrize("action", ["wipe", "reinstall"])
def test_it_starts_maintenance_on_a_stopped_server(make_key, acme_server, action):
    response = client_for(make_key(["maintenance:execute"])).post(
        f"{API}/servers/{acme_server.id}/maintenance", {"action": action}, format="json"
    )
    assert response.status_code == 202
    assert response.json()["kind"] == action and set(response.json()) == JOB_FIELDS


def test_maintenance_on_a_running_server_is_409(make_key, acme_server, put_in_state):
    put_in_state(acme_server, "running")
    response = client_for(make_key(["maintenance:execute"])).post(
        f"{API}/servers/{acme_server.id}/maintenance", {"action": "wipe"}, format="json"
    )
    assert (response.status_code, error_of(response)["state"]) == (409, "running")


def test_a_bad_maintenance_action_is_400(make_key, acme_server):
    response = client_for(make_key(["maintenance:execute"])).post(
        f"{API}/servers/{acme_server.id}/maintenance", {"action": "format-c"}, format="json"
    )
    assert set(error_of(response)["fields"]) == {"action"}


def test_a_backup_is_not_a_maintenance_action(acme_server):
    with pytest.raises(NotAMaintenanceAction):
        maintenance_start(server=acme_server, kind=JobKind.BACKUP, actor=Actor.system("test"))
    assert not Job.objects.filter(server=acme_server).exists()


def test_a_server_cannot_start_while_it_is_being_wiped(make_key, acme_server):
    client = client_for(make_key(["maintenance:execute", "servers:power"]))
    client.post(f"{API}/servers/{acme_server.id}/maintenance", {"action": "wipe"}, format="json")
    response = client.post(
        f"{API}/servers/{acme_server.id}/power", {"action": "start"}, format="json"
    )
    assert (response.status_code, error_of(response)["state"]) == (409, "stopped")


def test_a_second_wipe_waits_for_the_first(make_key, acme_server):
    client = client_for(make_key(["maintenance:execute"]))
    url = f"{API}/servers/{acme_server.id}/maintenance"
    assert client.post(url, {"action": "wipe"}, format="json").status_code == 202
    assert client.post(url, {"action": "reinstall"}, format="json").status_code == 409


def test_reading_a_backup_job_needs_backups_read(make_key, acme_server):
    _backup, job = backup_create(server=acme_server, actor=Actor.system("test"))
    assert client_for(make_key(["backups:read"])).get(f"{API}/jobs/{job.id}").status_code == 200
    refused = client_for(make_key(["servers:read"])).get(f"{API}/jobs/{job.id}")
    assert (refused.status_code, error_of(refused)["required_scope"]) == (403, "backups:read")


def test_reading_a_maintenance_job_needs_servers_read(make_key, acme_server):
    client = client_for(make_key(["maintenance:execute"]))
    job_id = client.post(
        f"{API}/servers/{acme_server.id}/maintenance", {"action": "wipe"}, format="json"
    ).json()["id"]
    assert client_for(make_key(["servers:read"])).get(f"{API}/jobs/{job_id}").status_code == 200
    refused = client_for(make_key(["backups:read"])).get(f"{API}/jobs/{job_id}")
    assert error_of(refused)["required_scope"] == "servers:read"


def test_another_organizations_job_is_404_not_found(make_key, globex_server):
    _backup, job = backup_create(server=globex_server, actor=Actor.system("test"))
    response = client_for(make_key(["backups:read"])).get(f"{API}/jobs/{job.id}")
    assert (response.status_code, error_of(response)["code"]) == (404, "not_found")


def test_a_job_of_a_server_outside_the_keys_list_is_404(make_key, acme_server, acme_other_server):
    _backup, job = backup_create(server=acme_other_server, actor=Actor.system("test"))
    key = make_key(["backups:read"], server_ids=[acme_server.id])
    response = client_for(key).get(f"{API}/jobs/{job.id}")
    unknown = client_for(key).get(f"{API}/jobs/job_doesNotExist0000000")
    assert response.status_code == unknown.status_code == 404
    assert response.content == unknown.content


def test_no_event_fires_for_backups_restores_or_maintenance(
    make_key, acme_server, available_backup, published
):
    published.clear()
    client = client_for(make_key(["backups:create", "backups:restore", "maintenance:execute"]))
    with freeze_time(timezone.now()) as frozen:
        make_backup(client, acme_server)
        client.post(f"{API}/servers/{acme_server.id}/backups/{available_backup.id}/restore")
        frozen.tick(5)
        sweep()
        client.post(
            f"{API}/servers/{acme_server.id}/maintenance", {"action": "reinstall"}, format="json"
        )
        frozen.tick(5)
        sweep()
    assert Job.objects.filter(server=acme_server, state="succeeded").count() == 4
    assert published == []
    assert Backup.objects.filter(server=acme_server, state="available").count() == 2
