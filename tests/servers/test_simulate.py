"""`manage.py simulate` and the matching admin actions; migrations and server.migrated."""

from io import StringIO

import pytest
from django.contrib.admin.utils import quote
from django.core.management import CommandError, call_command
from django.utils import timezone
from freezegun import freeze_time

from audit.actors import Actor
from servers.errors import InvalidState
from servers.fleet.moves import migration_begin
from servers.models import Server, ServerMigration
from servers.runtime import runtime_sweep
from tests.servers.conftest import Published, events_of


def simulate(*args):
    out = StringIO()
    call_command("simulate", *args, stdout=out)
    return out.getvalue()


def state_of(server):
    return Server.objects.get(id=server.id).state


@pytest.mark.parametrize("state", ["running", "restarting"])
def test_crash_stops_a_running_or_restarting_server_with_crashed_only(
    acme_server, put_in_state, published, state
):
    put_in_state(acme_server, state)
    published.clear()
    simulate(acme_server.id, "crash", "--exit-code", "137")
    assert state_of(acme_server) == "stopped"
    assert published == [
        Published(
            "server.crashed",
            acme_server.id,
            {"reason": "exited", "exit_code": 137, "will_restart": False},
        )
    ]


@pytest.mark.parametrize("state", ["stopped", "starting", "stopping"])
def test_crash_refuses_a_server_that_is_not_up(acme_server, put_in_state, state):
    put_in_state(acme_server, state)
    with pytest.raises(CommandError, match=state):
        simulate(acme_server.id, "crash")


def test_fail_start_starts_a_stopped_server_and_fails_it(acme_server, published):
    output = simulate(acme_server.id, "fail-start")
    assert state_of(acme_server) == "stopped"
    assert published == [
        Published(
            "server.crashed",
            acme_server.id,
            {"reason": "failed_to_start", "exit_code": None, "will_restart": False},
        )
    ]
    assert "failed to start" in output
    assert [t.trigger for t in acme_server.transitions.order_by("id")] == [
        "start",
        "failed_to_start",
    ]


def test_fail_start_fails_a_starting_server_now(acme_server, put_in_state, published):
    put_in_state(acme_server, "starting")
    simulate(acme_server.id, "fail-start", "--exit-code", "2")
    assert state_of(acme_server) == "stopped"
    assert published[-1].data == {
        "reason": "failed_to_start",
        "exit_code": 2,
        "will_restart": False,
    }


def test_fail_start_refuses_a_running_server(acme_server, put_in_state):
    put_in_state(acme_server, "running")
    with pytest.raises(CommandError):
        simulate(acme_server.id, "fail-start")


def test_migrate_moves_the_server_and_fires_migrated(acme_server, published):
    old = acme_server.address
    old_port = old.rpartition(":")[2]
    simulate(acme_server.id, "migrate", "--new-address", f"198.51.100.20:{old_port}")
    assert Server.objects.get(id=acme_server.id).address == f"198.51.100.20:{old_port}"
    assert published == [
        Published(
            "server.migrated",
            acme_server.id,
            {
                "previous_address": old,
                "new_address": f"198.51.100.20:{old_port}",
                "port_changed": False,
            },
        )
    ]


def test_migrate_says_when_the_port_changed_too(acme_server, published):
    simulate(acme_server.id, "migrate", "--new-address", "198.51.100.20:30000")
    assert published[-1].data["port_changed"] is True


def test_migrate_picks_a_new_address_when_none_is_given(acme_server):
    simulate(acme_server.id, "migrate")
    migration = ServerMigration.objects.get(server=acme_server)
    assert migration.state == "completed"
    assert migration.new_address != acme_server.address


@pytest.mark.parametrize("address", ["nowhere", "198.51.100.1", "198.51.100.1:70000", "::1:80"])
def test_migrate_refuses_a_bad_address(acme_server, address):
    with pytest.raises(CommandError):
        simulate(acme_server.id, "migrate", "--new-address", address)


def test_an_unknown_server_is_an_error(db):
    with pytest.raises(CommandError, match="No server"):
        simulate("srv_nope", "crash")


def test_a_migration_begun_completes_after_the_delay(acme_server, published):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        migration_begin(
            server=acme_server, new_address="198.51.100.9:25565", actor=Actor.system("t")
        )
        runtime_sweep(timezone.now())
        assert published == []
        frozen.tick(3)
        runtime_sweep(timezone.now())
    assert ServerMigration.objects.get().state == "completed"
    assert events_of(published) == ["server.migrated"]


def test_one_migration_at_a_time(acme_server):
    migration_begin(server=acme_server, new_address="198.51.100.9:25565", actor=Actor.system("t"))
    with pytest.raises(InvalidState):
        migration_begin(
            server=acme_server, new_address="198.51.100.10:25565", actor=Actor.system("t")
        )


# The same from Django admin.


def admin_action(client, action, server):
    return client.post(
        "/admin/servers/server/",
        {"action": action, "_selected_action": [server.id]},
        follow=True,
    )


def test_staff_can_crash_a_server_from_admin(staff_client, acme_server, put_in_state, published):
    put_in_state(acme_server, "running")
    published.clear()
    admin_action(staff_client, "simulate_crash", acme_server)
    assert state_of(acme_server) == "stopped"
    assert events_of(published) == ["server.crashed"]
    assert acme_server.transitions.order_by("-id").first().cause == "kill"


def test_staff_see_why_a_crash_was_refused(staff_client, acme_server):
    page = admin_action(staff_client, "simulate_crash", acme_server).content.decode()
    assert "Only a running game can crash; it is stopped." in page
    assert state_of(acme_server) == "stopped"


def test_staff_can_fail_a_start_from_admin(staff_client, acme_server, published):
    admin_action(staff_client, "simulate_fail_start", acme_server)
    assert published[-1].data == {
        "reason": "failed_to_start",
        "exit_code": None,
        "will_restart": False,
    }


def test_staff_can_migrate_a_server_from_admin(staff_client, acme_server):
    admin_action(staff_client, "simulate_migrate", acme_server)
    assert ServerMigration.objects.get(server=acme_server).state == "migrating"


def test_staff_turn_a_capability_off_in_admin(staff_client, acme_server):
    page = staff_client.get(f"/admin/servers/server/{quote(acme_server.id)}/change/")
    assert page.status_code == 200
    response = staff_client.post(
        f"/admin/servers/server/{quote(acme_server.id)}/change/",
        {
            "organization": acme_server.organization_id,
            "name": acme_server.name,
            "game": acme_server.game,
            "address": acme_server.address,
            "memory_mb": "1024",
            "disk_mb": "10240",
            "cpu_percent": "100",
            "processes": "256",
            "restart_on_crash": "on",
            "disabled_capabilities": ["backups", "console"],
            "transitions-TOTAL_FORMS": "0",
            "transitions-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Server.objects.get(id=acme_server.id).disabled_capabilities == ["backups", "console"]


def test_staff_see_a_crashs_signal_and_oom_kill_in_the_servers_history(staff_client, acme_server):
    acme_server.transitions.create(
        from_state="running", to_state="crashed", trigger="node", signal=9, oom=True
    )
    url = f"/admin/servers/server/{quote(acme_server.pk)}/change/"
    page = staff_client.get(url).content.decode()
    assert "SIGKILL (9), out of memory" in page
