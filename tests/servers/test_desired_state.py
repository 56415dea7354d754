"""Suspension, reinstall and deletion as desired state (servers.services' four writes and
servers.desired): recorded at once, refused to customers, carried out by the convergence loop.
On the simulated node here; tests/servers/test_desired_state_on_agents.py has real agents."""

import json
from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.utils import timezone
from django.utils.module_loading import import_string
from freezegun import freeze_time

from audit.actors import Actor
from audit.models import AuditRecord
from audit.services import PanelContext
from servers import services, tasks
from servers.backups.jobs import backup_create
from servers.desired import server_converge
from servers.errors import ServerNotFound
from servers.lifecycle import Trigger
from servers.models import (
    Backup,
    Job,
    JobKind,
    Node,
    Schedule,
    ScheduleRun,
    Server,
    ServerMinute,
    ServerState,
    ServerTransition,
)
from servers.schedules import ScheduleInput, schedule_create
from servers.services import (
    server_delete_request,
    server_reinstall_request,
    server_suspend,
    server_transition,
    server_unsuspend,
)
from tests.conftest import API, client_for, error_of
from tests.servers.conftest import events_of
from tests.servers.test_simulate import admin_action
from tests.webhooks.delivery_fixtures import deliver_due_now, hooks_fixture

__all__ = ["hooks_fixture"]

SYSTEM = Actor.system("billing")
SCOPES = [
    "servers:read", "servers:power", "console:write", "schedules:execute", "backups:create",
    "backups:restore", "maintenance:execute",
]  # fmt: skip


@pytest.fixture
def running(acme_server, put_in_state):
    return put_in_state(acme_server, "running")


def current(server: Server) -> Server:
    return Server.objects.get(id=server.id)


def suspended(server: Server) -> Server:
    return server_suspend(server=server, actor=SYSTEM)


# Suspension


def test_a_suspension_is_recorded_and_fires_server_suspended(acme_server, published):
    server_suspend(server=acme_server, actor=SYSTEM)

    assert current(acme_server).suspended
    assert events_of(published) == ["server.suspended"]
    assert published[0].data == {}


def test_suspending_a_suspended_server_changes_nothing(acme_server, published):
    first = suspended(acme_server).suspended_at
    again = suspended(acme_server)

    assert again.suspended_at == first
    assert events_of(published) == ["server.suspended"]


def test_a_suspension_withdraws_access_to_the_server_once_committed(
    acme_server, withdrawn, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        suspended(acme_server)
        assert withdrawn == []

    [withdrawal] = withdrawn
    assert withdrawal.server_ids == frozenset({acme_server.id})
    assert withdrawal.reason == "server suspended"


def test_a_suspension_queues_its_first_step_once_committed(
    acme_server, monkeypatch, django_capture_on_commit_callbacks
):
    queued = []
    monkeypatch.setattr(services, "async_task", lambda *args: queued.append(args))
    with django_capture_on_commit_callbacks(execute=True):
        suspended(acme_server)
        assert queued == []

    assert queued == [("servers.tasks.server_converge", acme_server.id)]
    assert callable(import_string(queued[0][0]))


def test_unsuspending_fires_server_unsuspended_and_leaves_the_game_stopped(acme_server, published):
    suspended(acme_server)
    server = server_unsuspend(server=acme_server, actor=SYSTEM)

    assert not server.suspended
    assert current(acme_server).state == ServerState.STOPPED
    assert events_of(published) == ["server.suspended", "server.unsuspended"]


def test_the_events_are_delivered_to_subscribed_webhooks(hooks, receiver, acme_server):
    hooks.webhook()
    suspended(acme_server)
    server_unsuspend(server=acme_server, actor=SYSTEM)

    assert deliver_due_now() == 2
    bodies = [json.loads(request.body) for request in receiver.requests]
    assert sorted(body["event"] for body in bodies) == ["server.suspended", "server.unsuspended"]
    assert list(bodies[0]) == ["event", "occurred_at", "server", "data", "delivery_id"]
    assert bodies[0]["server"] == {"id": acme_server.id, "name": "Survival"}


def test_the_server_record_says_suspended(make_key, acme_server):
    suspended(acme_server)
    response = client_for(make_key(["servers:read"])).get(f"{API}/servers/{acme_server.id}")
    assert response.json()["suspended"] is True


CUSTOMER_ACTIONS = [
    ("power", {"action": "start"}),
    ("console", {"command": "say hi"}),
    ("backups", {"name": "nightly"}),
    ("maintenance", {"action": "wipe"}),
]


@pytest.mark.parametrize(("route", "body"), CUSTOMER_ACTIONS, ids=[r for r, _ in CUSTOMER_ACTIONS])
def test_customer_actions_on_a_suspended_server_answer_409_server_suspended(
    make_key, running, route, body
):
    suspended(running)
    client = client_for(make_key(SCOPES))
    response = client.post(f"{API}/servers/{running.id}/{route}", body, format="json")

    assert response.status_code == 409
    assert error_of(response)["code"] == "server_suspended"


def test_a_restore_of_a_suspended_server_answers_409_server_suspended(make_key, acme_server):
    backup, _job = backup_create(server=acme_server, actor=SYSTEM)
    Backup.objects.filter(id=backup.id).update(state="available", sha256="ab" * 32)
    suspended(acme_server)

    url = f"{API}/servers/{acme_server.id}/backups/{backup.id}/restore"
    response = client_for(make_key(SCOPES)).post(url, {}, format="json")

    assert response.status_code == 409
    assert error_of(response)["code"] == "server_suspended"


def test_run_now_of_a_schedule_on_a_suspended_server_answers_409(make_key, running, alice):
    data = ScheduleInput(name="Autosave", cron="*/5 * * * *", command="save-all")
    schedule = schedule_create(server=running, data=data, created_by=alice.user, actor=SYSTEM)
    suspended(running)

    url = f"{API}/servers/{running.id}/schedules/{schedule.id}/run"
    response = client_for(make_key(SCOPES)).post(url, {}, format="json")

    assert response.status_code == 409
    assert error_of(response)["code"] == "server_suspended"
    assert ScheduleRun.objects.count() == 0


def test_a_scheduled_run_on_a_suspended_server_is_skipped_saying_so(running, alice):
    with freeze_time("2026-11-22 10:00:00"):
        data = ScheduleInput(name="Autosave", cron="*/5 * * * *", command="save-all")
        schedule_create(server=running, data=data, created_by=alice.user, actor=SYSTEM)
        suspended(running)
    with freeze_time("2026-11-22 10:05:10"):
        tasks.tick()

    [run] = ScheduleRun.objects.all()
    assert run.status == "skipped"
    assert run.output == "This server is suspended."


def test_the_loop_stops_the_game_of_a_suspended_server(running, published):
    suspended(running)
    server_converge(server_id=running.id)

    assert current(running).state == ServerState.STOPPING
    assert current(running).transitions.latest("at").cause == "the server is suspended"


def test_the_loop_asks_the_node_to_stop_a_suspended_game(demo_server, put_in_state, stand_in_agent):
    running = put_in_state(demo_server, "running")
    suspended(running)

    assert not server_converge(server_id=running.id)

    [call] = stand_in_agent.calls("POST")
    assert call.path == f"/v1/servers/{running.id}/stop"
    assert current(running).state == ServerState.STOPPING


def test_a_stop_the_node_refused_is_asked_again_later_not_at_every_tick(
    demo_server, put_in_state, stand_in_agent
):
    running = put_in_state(demo_server, "running")
    stop = f"/v1/servers/{running.id}/stop"
    stand_in_agent.answer("POST", stop, 409, {"error": {"code": "invalid_state", "message": "no"}})
    suspended(running)
    server_converge(server_id=running.id)
    server_converge(server_id=running.id)

    assert len(stand_in_agent.calls("POST")) == 1
    assert current(running).state == ServerState.RUNNING
    refused = current(running).transitions.latest("at")
    ServerTransition.objects.filter(id=refused.id).update(at=refused.at - timedelta(seconds=31))
    server_converge(server_id=running.id)
    assert len(stand_in_agent.calls("POST")) == 2


def test_a_suspended_server_that_crashes_is_not_started_again(running, published):
    suspended(running)
    server_transition(server_id=running.id, trigger=Trigger.CRASH, cause="test")

    assert published[-1].event == "server.crashed"
    assert published[-1].data["will_restart"] is False
    assert current(running).restart_due_at is None


def test_the_panel_shows_a_suspended_server_as_suspended(alice_client, acme_server):
    suspended(acme_server)

    listed = alice_client.get("/panel/servers/").content.decode()
    page = alice_client.get(f"/panel/servers/{acme_server.id}/").content.decode()

    assert "data-server-suspended>Suspended<" in listed
    assert 'id="server-suspended"' in page and "refused until it is unsuspended" in page
    assert page.count('disabled title="Not while suspended"') == 4  # start, stop, restart, send


def test_the_panel_refuses_power_on_a_suspended_server_saying_why(alice_client, acme_server):
    suspended(acme_server)
    url = f"/panel/servers/{acme_server.id}/power"
    response = alice_client.post(url, {"action": "start"}, follow=True)

    assert "This server is suspended." in response.content.decode()
    assert current(acme_server).state == ServerState.STOPPED


# Reinstall


def test_a_reinstall_is_carried_out_as_a_reinstall_job_and_the_request_cleared(acme_server):
    server_reinstall_request(server=acme_server, actor=SYSTEM)
    assert current(acme_server).reinstall_requested_at is not None

    assert server_converge(server_id=acme_server.id)

    [job] = Job.objects.filter(server=acme_server)
    assert job.kind == JobKind.REINSTALL
    assert current(acme_server).reinstall_requested_at is None


def test_a_reinstall_asks_the_node_for_an_empty_directory(demo_server, stand_in_agent):
    server_reinstall_request(server=demo_server, actor=SYSTEM)

    assert server_converge(server_id=demo_server.id)

    [call] = stand_in_agent.calls("POST")
    assert call.path == f"/v1/servers/{demo_server.id}/jobs"
    assert (call.body["kind"], call.body["empty"]) == ("reinstall", True)
    assert current(demo_server).reinstall_requested_at is None


def test_a_reinstall_the_node_refuses_stays_asked(demo_server, stand_in_agent):
    path = f"/v1/servers/{demo_server.id}/jobs"
    stand_in_agent.answer("POST", path, 409, {"error": {"code": "invalid_state", "message": "no"}})
    server_reinstall_request(server=demo_server, actor=SYSTEM)

    assert not server_converge(server_id=demo_server.id)
    assert not server_converge(server_id=demo_server.id)  # not asked again at once

    assert current(demo_server).reinstall_requested_at is not None
    assert len(stand_in_agent.calls("POST")) == 1


def test_a_running_server_to_be_reinstalled_is_stopped_first(running):
    server_reinstall_request(server=running, actor=SYSTEM)

    assert not server_converge(server_id=running.id)

    assert current(running).state == ServerState.STOPPING
    assert not Job.objects.filter(server=running).exists()


def test_a_server_to_be_reinstalled_is_not_started_meanwhile(make_key, acme_server):
    server_reinstall_request(server=acme_server, actor=SYSTEM)
    client = client_for(make_key(SCOPES))
    url = f"{API}/servers/{acme_server.id}/power"
    response = client.post(url, {"action": "start"}, format="json")

    assert response.status_code == 409
    assert error_of(response)["code"] == "invalid_state"


# Deletion


def test_a_server_being_deleted_is_not_found_by_customers(make_key, alice_client, acme_server):
    server_delete_request(server=acme_server, actor=SYSTEM)

    client = client_for(make_key(SCOPES))
    response = client.get(f"{API}/servers/{acme_server.id}")
    assert response.status_code == 404
    assert error_of(response)["code"] == "server_not_found"
    assert client.get(f"{API}/servers").json()["results"] == []
    assert alice_client.get(f"/panel/servers/{acme_server.id}/").status_code == 404


def test_a_deletion_asked_twice_is_not_found_the_second_time(acme_server):
    server_delete_request(server=acme_server, actor=SYSTEM)
    with pytest.raises(ServerNotFound):
        server_delete_request(server=acme_server, actor=SYSTEM)


def test_a_deletion_withdraws_access_to_the_server(
    acme_server, withdrawn, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        server_delete_request(server=acme_server, actor=SYSTEM)

    [withdrawal] = withdrawn
    assert withdrawal.server_ids == frozenset({acme_server.id})


def test_the_loop_removes_a_deleted_server_and_its_rows(acme_server, alice):
    data = ScheduleInput(name="Autosave", cron="*/5 * * * *", command="save-all")
    schedule_create(server=acme_server, data=data, created_by=alice.user, actor=SYSTEM)
    backup_create(server=acme_server, actor=SYSTEM)
    at = timezone.now().replace(second=0, microsecond=0)
    ServerMinute.objects.create(
        server=acme_server, at=at, cpu_percent=1.0, memory_mb=10.0, players_online=0
    )
    Job.objects.filter(server=acme_server).update(state="succeeded")
    server_delete_request(server=acme_server, actor=SYSTEM)

    tasks.tick()

    assert not Server.objects.filter(id=acme_server.id).exists()
    assert not Schedule.objects.exists() and not Backup.objects.exists()
    assert not ServerMinute.objects.exists()


def test_a_deletion_waits_for_its_node_to_answer(demo_server, agent_node, stand_in_agent):
    stale = timezone.now() - timedelta(minutes=1)
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=stale)
    server_delete_request(server=demo_server, actor=SYSTEM)

    assert not server_converge(server_id=demo_server.id)

    assert current(demo_server).deleting
    assert stand_in_agent.calls() == []


def test_a_deleted_running_server_is_stopped_before_it_is_removed(running):
    server_delete_request(server=running, actor=SYSTEM)

    assert not server_converge(server_id=running.id)
    assert current(running).state == ServerState.STOPPING


def test_the_writes_are_audited_for_a_person_in_the_panel(alice, acme_server):
    person = Actor.person(PanelContext(user_email=alice.user.email))
    server_suspend(server=acme_server, actor=person)
    server_unsuspend(server=acme_server, actor=person)
    server_reinstall_request(server=acme_server, actor=person)
    server_delete_request(server=acme_server, actor=person)

    rows = AuditRecord.objects.order_by("occurred_at", "id")
    actions = list(rows.values_list("action", flat=True))
    assert actions == ["server.suspend", "server.unsuspend", "server.reinstall", "server.delete"]


# Staff, in admin


def test_staff_suspend_and_unsuspend_a_server_in_admin(staff_client, acme_server, published):
    admin_action(staff_client, "suspend", acme_server)
    assert current(acme_server).suspended
    admin_action(staff_client, "unsuspend", acme_server)

    assert not current(acme_server).suspended
    assert events_of(published) == ["server.suspended", "server.unsuspended"]


def test_staff_deleting_a_server_in_admin_asks_for_its_deletion(staff_client, acme_server):
    url = f"/admin/servers/server/{quote(acme_server.id)}/delete/"
    response = staff_client.post(url, {"post": "yes"}, follow=True)

    # Where the admin sent staff says why, should the deletion not be asked.
    assert response.redirect_chain == [("/admin/servers/server/", 302)], response.content[:3000]
    assert current(acme_server).deleting
