"""The panel's server pages: state, power, console, schedules, backups, settings, config
events; each action audited, each page scoped to the current organization and the person's
scopes."""

import pytest
from django.utils import timezone
from freezegun import freeze_time

from audit.actors import Actor
from audit.models import AuditRecord
from servers.backups.jobs import backup_create
from servers.models import ConfigEvent, Job, Schedule, ScheduleRun, Server, SettingChange
from servers.runtime import runtime_sweep
from servers.schedules import ScheduleInput, schedule_create
from servers.services import server_suspend
from tests.servers.conftest import Published

PANEL = "/panel/servers/"


def page(client, path, status=200):
    response = client.get(path)
    assert response.status_code == status, response.content.decode()[:500]
    return response.content.decode()


def state_of(server):
    return Server.objects.get(id=server.id).state


def test_the_list_shows_the_organizations_servers_and_their_state(
    alice_client, acme_server, globex_server
):
    html = page(alice_client, PANEL)
    assert acme_server.name in html and 'data-server-state="' in html
    assert globex_server.id not in html


def test_signing_in_is_required(client, acme_server):
    response = client.get(PANEL)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_states_feed_gives_every_servers_state(alice_client, acme_server):
    body = alice_client.get(f"{PANEL}states").json()
    assert body["servers"][acme_server.id]["state"] == "stopped"


def test_another_organizations_server_is_404(alice_client, globex_server):
    page(alice_client, f"{PANEL}{globex_server.id}/", status=404)


def test_the_navigation_links_to_servers(alice_client, acme_server):
    assert f'href="{PANEL}"' in page(alice_client, f"{PANEL}{acme_server.id}/")


@pytest.mark.parametrize("tab", ["", "schedules/", "backups/", "settings/", "config-events/"])
def test_every_server_page_renders(alice_client, acme_server, tab):
    page(alice_client, f"{PANEL}{acme_server.id}/{tab}")


def test_power_from_the_panel_is_audited_with_the_person(alice_client, acme_server):
    response = alice_client.post(f"{PANEL}{acme_server.id}/power", {"action": "start"})
    assert response.status_code == 302
    assert state_of(acme_server) == "starting"
    record = AuditRecord.objects.get(action="server.power")
    assert (record.source, record.actor_email, record.server_id) == (
        "panel",
        "alice@acme.test",
        acme_server.id,
    )
    assert acme_server.transitions.get().cause == "panel alice@acme.test"


def test_a_power_action_the_state_forbids_is_shown_not_done(alice_client, acme_server):
    response = alice_client.post(f"{PANEL}{acme_server.id}/power", {"action": "stop"}, follow=True)
    assert "Cannot stop a server that is stopped" in response.content.decode()
    assert state_of(acme_server) == "stopped"
    assert not AuditRecord.objects.filter(action="server.power").exists()


def test_power_needs_the_scope_in_the_panel_too(bob_client, acme_server):
    response = bob_client.post(f"{PANEL}{acme_server.id}/power", {"action": "start"})
    assert response.status_code == 403
    assert state_of(acme_server) == "stopped"


def test_a_console_command_from_the_panel_names_the_person(
    alice_client, acme_server, put_in_state, published
):
    put_in_state(acme_server, "running")
    published.clear()
    alice_client.post(f"{PANEL}{acme_server.id}/console", {"command": "say hi"})
    assert published == [
        Published(
            "console.command_sent",
            acme_server.id,
            {"command": "say hi", "source": "panel", "key_id": None, "user": "alice@acme.test"},
        )
    ]
    assert AuditRecord.objects.filter(action="server.console", server_id=acme_server.id).exists()
    assert "say hi" in page(alice_client, f"{PANEL}{acme_server.id}/")


def test_the_console_refuses_a_stopped_server_in_the_panel(alice_client, acme_server, published):
    response = alice_client.post(
        f"{PANEL}{acme_server.id}/console", {"command": "say hi"}, follow=True
    )
    assert "need a running server" in response.content.decode()
    assert published == []


def test_the_console_refuses_a_control_character_in_the_panel(
    alice_client, acme_server, put_in_state, published
):
    put_in_state(acme_server, "running")
    published.clear()
    response = alice_client.post(
        f"{PANEL}{acme_server.id}/console", {"command": "say a\u0007b"}, follow=True
    )
    assert "one line without control characters" in response.content.decode()
    assert published == []


def test_a_custom_game_shows_no_players(alice_client, acme_other_server):
    assert "does not report its players" in page(alice_client, f"{PANEL}{acme_other_server.id}/")


def test_a_disabled_capability_page_is_refused(alice_client, acme_server):
    Server.objects.filter(id=acme_server.id).update(disabled_capabilities=["schedules"])
    html = page(alice_client, f"{PANEL}{acme_server.id}/schedules/", status=403)
    assert "feature_not_enabled" in html


# Schedules


SCHEDULE = {
    "name": "Autosave",
    "cron": "*/10 * * * *",
    "command": "save-all",
    "enabled": "on",
    "alert_on": ["failed"],
    "alert_after_missed": "3",
}


def test_a_person_creates_a_schedule_and_is_its_creator(alice_client, acme_server, alice):
    response = alice_client.post(f"{PANEL}{acme_server.id}/schedules/new", SCHEDULE)
    assert response.status_code == 302
    schedule = Schedule.objects.get()
    assert (schedule.created_by, schedule.alert_on, schedule.enabled) == (
        alice.user,
        ["failed"],
        True,
    )


def test_a_bad_cron_is_shown_on_the_form(alice_client, acme_server):
    response = alice_client.post(
        f"{PANEL}{acme_server.id}/schedules/new", {**SCHEDULE, "cron": "often"}
    )
    assert response.status_code == 400
    assert "five fields" in response.content.decode()


@pytest.fixture
def schedule(acme_server, alice):
    data = ScheduleInput(name="Autosave", cron="*/10 * * * *", command="save-all")
    return schedule_create(
        server=acme_server, data=data, created_by=alice.user, actor=Actor.system("t")
    )


def test_a_person_edits_a_schedule(alice_client, acme_server, schedule):
    url = f"{PANEL}{acme_server.id}/schedules/{schedule.id}/edit"
    assert "Autosave" in page(alice_client, url)
    alice_client.post(url, {**SCHEDULE, "command": "say hello"})
    assert Schedule.objects.get().command == "say hello"


def test_another_servers_schedule_is_404_in_the_panel(alice_client, acme_other_server, schedule):
    url = f"{PANEL}{acme_other_server.id}/schedules/{schedule.id}/edit"
    page(alice_client, url, status=404)
    assert alice_client.post(url, SCHEDULE).status_code == 404
    assert Schedule.objects.get().command == "save-all"


def test_a_person_disables_and_enables_a_schedule(alice_client, acme_server, schedule):
    url = f"{PANEL}{acme_server.id}/schedules/{schedule.id}/toggle"
    alice_client.post(url)
    assert Schedule.objects.get().enabled is False
    alice_client.post(url)
    assert Schedule.objects.get().enabled is True


def test_a_person_runs_a_schedule_now(alice_client, acme_server, schedule, published):
    alice_client.post(f"{PANEL}{acme_server.id}/schedules/{schedule.id}/run")
    run = ScheduleRun.objects.get()
    assert (run.trigger, run.status) == ("run_now", "skipped")
    assert published[-1].event == "command_schedule.executed"


def test_a_person_deletes_a_schedule(alice_client, acme_server, schedule):
    alice_client.post(f"{PANEL}{acme_server.id}/schedules/{schedule.id}/delete")
    assert not Schedule.objects.exists()


def test_reading_schedules_is_not_enough_to_change_them(bob_client, acme_server):
    assert bob_client.post(f"{PANEL}{acme_server.id}/schedules/new", SCHEDULE).status_code == 403


# Backups and maintenance


def test_a_person_makes_a_backup(alice_client, acme_server):
    alice_client.post(f"{PANEL}{acme_server.id}/backups/new", {"name": "before the update"})
    assert Job.objects.get().kind == "backup"
    assert "before the update" in page(alice_client, f"{PANEL}{acme_server.id}/backups/")


def test_a_person_restores_a_backup(alice_client, acme_server):
    with freeze_time(timezone.now()) as frozen:
        backup, _job = backup_create(server=acme_server, actor=Actor.system("t"))
        frozen.tick(5)
        runtime_sweep(timezone.now())
    alice_client.post(f"{PANEL}{acme_server.id}/backups/{backup.id}/restore")
    assert Job.objects.filter(kind="restore").exists()


def test_a_person_restores_a_backup_of_a_running_server_from_an_enabled_button(
    alice_client, acme_server, put_in_state
):
    with freeze_time(timezone.now()) as frozen:
        backup, _job = backup_create(server=acme_server, actor=Actor.system("t"))
        frozen.tick(5)
        runtime_sweep(timezone.now())
    put_in_state(acme_server, "running")
    html = page(alice_client, f"{PANEL}{acme_server.id}/backups/")
    assert 'class="button small secondary">Restore</button>' in html
    alice_client.post(f"{PANEL}{acme_server.id}/backups/{backup.id}/restore")
    assert Server.objects.get(id=acme_server.id).state == "stopped"  # the node stops it first


def test_maintenance_on_a_running_server_is_refused_with_a_message(
    alice_client, acme_server, put_in_state
):
    put_in_state(acme_server, "running")
    response = alice_client.post(
        f"{PANEL}{acme_server.id}/maintenance", {"action": "wipe"}, follow=True
    )
    assert "Stop the server to wipe" in response.content.decode()
    assert not Job.objects.exists()


# Settings and config events


def test_a_person_changes_settings_and_the_history_says_who(alice_client, acme_server):
    form = {
        "max_players": "40",
        "motd": "Welcome",
        "difficulty": "hard",
        "pvp": "true",
        "view_distance": "10",
    }
    alice_client.post(f"{PANEL}{acme_server.id}/settings", form)
    changes = {c.key: c.changed_by for c in SettingChange.objects.all()}
    assert changes == {
        "max_players": "alice@acme.test",
        "motd": "alice@acme.test",
        "difficulty": "alice@acme.test",
    }
    assert "Welcome" in page(alice_client, f"{PANEL}{acme_server.id}/settings/")


def test_a_suspended_servers_settings_do_not_change(alice_client, acme_server):
    server_suspend(server=acme_server, actor=Actor.system("billing"))
    form = {"max_players": "40", "motd": "Hi", "difficulty": "hard", "pvp": "true"}
    form["view_distance"] = "10"
    response = alice_client.post(f"{PANEL}{acme_server.id}/settings", form)
    assert response.status_code == 400
    assert "This server is suspended." in response.content.decode()
    assert not SettingChange.objects.exists()


def test_a_reader_sees_settings_but_cannot_change_them(bob_client, acme_server):
    assert "servers:power" in page(bob_client, f"{PANEL}{acme_server.id}/settings/")
    response = bob_client.post(f"{PANEL}{acme_server.id}/settings", {"max_players": "40"})
    assert response.status_code == 403


def test_a_person_schedules_and_cancels_a_config_event(alice_client, acme_server):
    url = f"{PANEL}{acme_server.id}/config-events/"
    response = alice_client.post(
        url,
        {
            "name": "PvP night",
            "apply_at": "2099-01-01T20:00",
            "revert_at": "2099-01-02T06:00",
            "pvp": "false",
        },
    )
    assert response.status_code == 302
    event = ConfigEvent.objects.get()
    assert (event.changes, event.apply_at.hour) == ({"pvp": "false"}, 20)
    alice_client.post(f"{url}{event.id}/end")
    assert ConfigEvent.objects.get().state == "cancelled"


def test_a_config_event_without_changes_is_refused(alice_client, acme_server):
    response = alice_client.post(
        f"{PANEL}{acme_server.id}/config-events/",
        {"name": "Nothing", "apply_at": "2099-01-01T20:00"},
    )
    assert response.status_code == 400
    assert not ConfigEvent.objects.exists()


def test_the_crash_history_shows_the_signal_and_an_oom_kill(alice_client, acme_server):
    acme_server.transitions.create(
        from_state="running", to_state="crashed", trigger="node", signal=9, oom=True
    )
    html = page(alice_client, f"{PANEL}{acme_server.id}/")
    assert "killed by SIGKILL (9)" in html
    assert "out of memory" in html
