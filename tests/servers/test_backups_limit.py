"""A server keeps as many backups as its plan says: none at 0, the newest N otherwise."""

from django.utils import timezone
from freezegun import freeze_time

from audit.actors import Actor
from servers.backups.jobs import backup_create, job_finish
from servers.models import Backup, BackupState, Job, JobKind, Server
from servers.runtime import runtime_sweep
from tests.conftest import API, client_for, error_of


def keeping(server: Server, limit: int | None) -> Server:
    Server.objects.filter(id=server.id).update(backups_limit=limit)
    server.refresh_from_db()
    return server


def made_backups(server: Server, count: int) -> list[Backup]:
    """`count` backups, a second apart, each finished by the simulated runtime."""
    made = []
    with freeze_time(timezone.now()) as frozen:
        for _ in range(count):
            backup, _job = backup_create(server=server, actor=Actor.system("test"))
            frozen.tick(5)
            runtime_sweep(timezone.now())
            made.append(backup)
    return made


def test_a_server_whose_plan_keeps_no_backups_refuses_one(make_key, acme_server):
    server = keeping(acme_server, 0)

    response = client_for(make_key(["backups:create"])).post(
        f"{API}/servers/{server.id}/backups", {}, format="json"
    )

    assert response.status_code == 403
    assert error_of(response)["code"] == "feature_not_enabled"
    assert not Backup.objects.filter(server=server).exists()


def test_a_new_backup_beyond_the_limit_deletes_the_oldest(acme_server):
    server = keeping(acme_server, 2)

    made = made_backups(server, 3)

    kept = Backup.objects.filter(server=server).order_by("created_at")
    assert [backup.id for backup in kept] == [backup.id for backup in made[1:]]
    assert {backup.state for backup in kept} == {BackupState.AVAILABLE}


def test_a_server_without_a_limit_keeps_every_backup(acme_server):
    server = keeping(acme_server, None)

    made_backups(server, 3)

    assert Backup.objects.filter(server=server).count() == 3


def test_a_backup_a_restore_is_reading_is_kept_beyond_the_limit(acme_server):
    server = keeping(acme_server, 1)
    (oldest,) = made_backups(server, 1)
    Job.objects.create(server=server, kind=JobKind.RESTORE, backup=oldest)  # under way
    newest, job = backup_create(server=server, actor=Actor.system("test"))

    job_finish(job_id=job.id, succeeded=True, size_bytes=1)

    kept = set(Backup.objects.filter(server=server).values_list("id", flat=True))
    assert kept == {oldest.id, newest.id}
