"""Crash restarts: a game that crashes while running is started again 5 s later, unless the
setting is off, it crash-loops (within 60 s of its last start) or its node is unreachable;
server.crashed says which, and the history calls the start automatic."""

import pytest
from django.contrib.admin.utils import quote
from django.utils import timezone
from freezegun import freeze_time

from servers.crash_restarts import AUTOMATIC_CAUSE
from servers.lifecycle import CrashDetails, Trigger
from servers.models import Node, Server, ServerTransition
from servers.services import crash_restarts_run_due, server_transition
from tests.conftest import API, client_for

START = "2026-11-27 10:00:00"


def crash(server, at):
    with freeze_time(at):
        server_transition(server_id=server.id, trigger=Trigger.CRASH, cause="test", exit_code=1)


def run_due(at):
    with freeze_time(at):
        return crash_restarts_run_due(timezone.now())


@pytest.fixture
def running(acme_server, put_in_state):
    with freeze_time(START):
        return put_in_state(acme_server, "running")


def test_a_crash_after_a_minute_of_running_says_it_will_restart(running, published):
    crash(running, "2026-11-27 10:02:00")
    assert published[-1].data["will_restart"] is True


def test_the_server_is_started_again_5_seconds_after_its_crash(running):
    crash(running, "2026-11-27 10:02:00")
    assert run_due("2026-11-27 10:02:04") == 0
    assert run_due("2026-11-27 10:02:05") == 1
    assert Server.objects.get(id=running.id).state == "starting"


def test_the_history_says_the_start_was_automatic(running):
    crash(running, "2026-11-27 10:02:00")
    run_due("2026-11-27 10:02:05")
    last = ServerTransition.objects.filter(server=running).latest("at", "id")
    assert (last.to_state, last.cause) == ("starting", AUTOMATIC_CAUSE)


def test_a_crash_within_60_seconds_of_its_start_is_a_crash_loop_and_stays_stopped(
    running, published
):
    crash(running, "2026-11-27 10:00:59")
    assert published[-1].data["will_restart"] is False
    assert run_due("2026-11-27 10:05:00") == 0
    assert Server.objects.get(id=running.id).state == "stopped"


def test_an_automatic_start_counts_as_the_last_start(running, published):
    crash(running, "2026-11-27 10:02:00")
    run_due("2026-11-27 10:02:05")
    with freeze_time("2026-11-27 10:02:06"):
        server_transition(server_id=running.id, trigger=Trigger.READY, cause="test")
    crash(running, "2026-11-27 10:02:30")
    assert published[-1].data["will_restart"] is False


def test_a_server_with_restart_on_crash_off_stays_stopped(running, published):
    Server.objects.filter(id=running.id).update(restart_on_crash=False)
    crash(running, "2026-11-27 10:02:00")
    assert published[-1].data["will_restart"] is False
    assert run_due("2026-11-27 10:05:00") == 0


def test_a_server_whose_node_is_unreachable_stays_stopped(demo_server, put_in_state, published):
    with freeze_time(START):
        put_in_state(demo_server, "running")
    Node.objects.filter(id=demo_server.node_id).update(last_heartbeat_at=None)
    crash(demo_server, "2026-11-27 10:02:00")
    assert published[-1].data["will_restart"] is False


def test_a_failed_start_is_not_restarted(acme_server, put_in_state, published):
    with freeze_time(START):
        put_in_state(acme_server, "starting")
    with freeze_time("2026-11-27 10:02:00"):
        server_transition(server_id=acme_server.id, trigger=Trigger.FAILED_TO_START, cause="t")
    assert published[-1].data["will_restart"] is False
    assert run_due("2026-11-27 10:05:00") == 0


def test_a_start_made_meanwhile_takes_the_place_of_the_automatic_one(running):
    crash(running, "2026-11-27 10:02:00")
    with freeze_time("2026-11-27 10:02:02"):
        server_transition(server_id=running.id, trigger=Trigger.START, cause="test")
    assert run_due("2026-11-27 10:02:05") == 0
    starts = ServerTransition.objects.filter(server=running, to_state="starting")
    assert starts.count() == 2  # the first start, and the one made meanwhile


def test_the_due_start_is_made_once_however_often_it_is_looked_for(running):
    crash(running, "2026-11-27 10:02:00")
    made = [run_due("2026-11-27 10:02:05"), run_due("2026-11-27 10:02:06")]
    assert made == [1, 0]


def test_the_server_record_shows_the_setting(acme_server, make_key):
    body = client_for(make_key(["servers:read"])).get(f"{API}/servers/{acme_server.id}").json()
    assert body["restart_on_crash"] is True


def test_a_servers_write_holder_turns_it_off_in_the_panel(acme_server, alice_client):
    alice_client.post(f"/panel/servers/{acme_server.id}/crash-restarts", {})
    assert Server.objects.get(id=acme_server.id).restart_on_crash is False


def test_a_servers_write_holder_turns_it_on_in_the_panel(acme_server, alice_client):
    Server.objects.filter(id=acme_server.id).update(restart_on_crash=False)
    alice_client.post(f"/panel/servers/{acme_server.id}/crash-restarts", {"restart_on_crash": "on"})
    assert Server.objects.get(id=acme_server.id).restart_on_crash is True


def test_staff_set_it_in_admin(staff_client, acme_server):
    url = f"/admin/servers/server/{quote(acme_server.pk)}/change/"
    page = staff_client.get(url).content.decode()
    assert 'name="restart_on_crash"' in page


def test_a_server_its_node_stopped_for_its_disk_use_stays_stopped(
    demo_server, put_in_state, published
):
    with freeze_time(START):
        put_in_state(demo_server, "running")
    with freeze_time("2026-11-27 10:02:00"):
        Node.objects.filter(id=demo_server.node_id).update(last_heartbeat_at=timezone.now())
        server_transition(
            server_id=demo_server.id,
            trigger=Trigger.CRASH,
            cause="test",
            crash=CrashDetails(reason="disk_limit"),
        )
    assert (published[-1].data["reason"], published[-1].data["will_restart"]) == (
        "disk_limit",
        False,
    )
