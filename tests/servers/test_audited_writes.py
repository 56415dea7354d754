"""Who acted, for the writes that took no actor before: `server_create` and `backup_delete`
take one and write their audit row (a person's, inside the service's transaction; the
platform's own moves write none), as every other service does."""

from audit.actors import Actor
from audit.models import AuditRecord
from audit.services import PanelContext
from servers.backups.jobs import backup_create, job_finish
from servers.backups.storage import backup_delete
from servers.models import Backup
from servers.services import server_create
from tests.servers.node_fixtures import online
from tests.servers.test_server_placement import admin_add

ALICE = Actor.person(PanelContext(user_email="alice@acme.test", path="/panel/servers/"))


def test_a_person_creating_a_server_is_audited(acme):
    server = server_create(organization=acme, name="Survival", game="minecraft", actor=ALICE)

    record = AuditRecord.objects.get(action="server.create")
    assert (record.actor_email, record.server_id) == ("alice@acme.test", server.id)
    assert (record.organization_id, record.source) == (acme.id, "panel")


def test_the_platform_creating_a_server_writes_no_audit_row(acme):
    server_create(organization=acme, name="Survival", game="minecraft", actor=Actor.system("t"))

    assert not AuditRecord.objects.exists()


def test_staff_adding_a_server_in_the_admin_is_audited(staff, staff_client, acme):
    online("node-a")

    admin_add(staff_client, acme)

    record = AuditRecord.objects.get(action="server.create")
    assert (record.actor_email, record.path) == (staff.email, "/admin/servers/server/add/")


def test_a_person_deleting_a_backup_on_the_node_is_audited_and_it_is_gone(acme_server):
    backup, job = backup_create(server=acme_server, actor=Actor.system("test"))
    job_finish(job_id=job.id, succeeded=True, size_bytes=10)

    backup_delete(backup=Backup.objects.get(id=backup.id), actor=ALICE)

    assert not Backup.objects.filter(id=backup.id).exists()
    record = AuditRecord.objects.get(action="backup.delete")
    assert (record.actor_email, record.server_id) == ("alice@acme.test", acme_server.id)
