"""Command schedules: timing, catch-up after downtime, missed runs, alerts and their email."""

import pytest
from django.core import mail
from django_q.models import Schedule as QSchedule
from freezegun import freeze_time

from audit.actors import Actor
from servers import tasks
from servers.errors import InvalidSchedule
from servers.models import Schedule, ScheduleRun
from servers.schedules import ScheduleInput, schedule_create, schedule_set_enabled
from tests.conftest import API, client_for, error_of
from tests.servers.conftest import Published, events_of

SYSTEM = Actor.system("test")


@pytest.fixture
def running(acme_server, put_in_state):
    with freeze_time("2026-11-22 09:00:00"):
        return put_in_state(acme_server, "running")


def make_schedule(server, creator, *, cron="*/5 * * * *", command="save-all", **options):
    with freeze_time("2026-11-22 10:00:00"):
        data = ScheduleInput(name="Autosave", cron=cron, command=command, **options)
        return schedule_create(server=server, data=data, created_by=creator, actor=SYSTEM)


def tick_at(moment):
    with freeze_time(moment):
        tasks.tick()


def runs():
    return list(ScheduleRun.objects.order_by("ran_at", "id"))


def test_it_plans_the_next_slot_from_the_cron(running, alice):
    schedule = make_schedule(running, alice.user)
    assert schedule.next_run_at.isoformat() == "2026-11-22T10:05:00+00:00"


def test_nothing_runs_before_the_slot(running, alice):
    make_schedule(running, alice.user)
    tick_at("2026-11-22 10:04:59")
    assert runs() == []


def test_it_runs_at_its_slot_and_plans_the_next(running, alice):
    schedule = make_schedule(running, alice.user)
    tick_at("2026-11-22 10:05:20")
    [run] = runs()
    assert (run.trigger, run.status) == ("schedule", "succeeded")
    assert run.scheduled_for.isoformat() == "2026-11-22T10:05:00+00:00"
    schedule.refresh_from_db()
    assert schedule.next_run_at.isoformat() == "2026-11-22T10:10:00+00:00"


def test_every_run_fires_executed_with_its_status(running, alice, published):
    schedule = make_schedule(running, alice.user)
    published.clear()
    tick_at("2026-11-22 10:05:20")
    [run] = runs()
    assert published == [
        Published(
            "command_schedule.executed",
            running.id,
            {
                "schedule_id": schedule.id,
                "schedule_name": "Autosave",
                "run_id": run.id,
                "trigger": "schedule",
                "status": "succeeded",
            },
        )
    ]


def test_a_run_on_a_server_that_is_not_running_is_skipped(acme_server, alice, published):
    make_schedule(acme_server, alice.user)
    tick_at("2026-11-22 10:05:20")
    assert [r.status for r in runs()] == ["skipped"]
    assert published[-1].data["status"] == "skipped"


def test_a_command_the_game_refuses_is_a_failed_run(running, alice):
    make_schedule(running, alice.user, command="fly away")
    tick_at("2026-11-22 10:05:20")
    assert [r.status for r in runs()] == ["failed"]


def test_a_status_it_alerts_on_fires_one_alert_and_emails_the_creator(
    running, alice, published, django_capture_on_commit_callbacks
):
    schedule = make_schedule(running, alice.user, command="fly away", alert_on=("failed",))
    published.clear()
    with django_capture_on_commit_callbacks(execute=True):
        tick_at("2026-11-22 10:05:20")
    [run] = runs()
    assert events_of(published) == ["command_schedule.executed", "command_schedule.alert"]
    assert published[1].data == {
        "schedule_id": schedule.id,
        "schedule_name": "Autosave",
        "reason": "run_status",
        "run_id": run.id,
        "status": "failed",
        "missed_runs": None,
    }
    [email] = mail.outbox
    assert email.to == ["alice@acme.test"]
    assert "Autosave" in email.subject and "failed" in email.subject


def test_a_status_it_does_not_alert_on_fires_no_alert(
    acme_server, alice, published, django_capture_on_commit_callbacks
):
    make_schedule(acme_server, alice.user, alert_on=("failed",))
    with django_capture_on_commit_callbacks(execute=True):
        tick_at("2026-11-22 10:05:20")  # skipped: the server is stopped
    assert "command_schedule.alert" not in events_of(published)
    assert mail.outbox == []


def test_it_alerts_on_skipped_when_asked(acme_server, alice, published):
    make_schedule(acme_server, alice.user, alert_on=("skipped",))
    tick_at("2026-11-22 10:05:20")
    assert published[-1].data["reason"] == "run_status"
    assert published[-1].data["status"] == "skipped"


def test_after_downtime_it_catches_up_with_one_run_for_the_latest_slot(running, alice):
    make_schedule(running, alice.user)
    tick_at("2026-11-22 10:52:00")  # slots 10:05 ... 10:50 passed unseen
    [run] = runs()
    assert run.scheduled_for.isoformat() == "2026-11-22T10:50:00+00:00"
    assert Schedule.objects.get().next_run_at.isoformat() == "2026-11-22T10:55:00+00:00"


def test_missed_runs_in_a_row_fire_one_alert_with_the_count(
    running, alice, published, django_capture_on_commit_callbacks
):
    schedule = make_schedule(running, alice.user, alert_after_missed=3)
    published.clear()
    with django_capture_on_commit_callbacks(execute=True):
        tick_at("2026-11-22 10:52:00")  # ten slots: nine missed, the tenth caught up
    alerts = [p for p in published if p.event == "command_schedule.alert"]
    assert [a.data for a in alerts] == [
        {
            "schedule_id": schedule.id,
            "schedule_name": "Autosave",
            "reason": "missed_runs",
            "run_id": None,
            "status": None,
            "missed_runs": 9,
        }
    ]
    [email] = mail.outbox
    assert email.to == ["alice@acme.test"] and "missed 9 runs" in email.subject


def test_fewer_missed_runs_than_the_threshold_fire_no_alert(running, alice, published):
    make_schedule(running, alice.user, alert_after_missed=3)
    tick_at("2026-11-22 10:12:00")  # 10:05 missed, 10:10 caught up
    assert "command_schedule.alert" not in events_of(published)
    assert Schedule.objects.get().missed_in_a_row == 0  # the catch-up run ended the streak


def test_a_tick_every_minute_misses_nothing(running, alice, published):
    make_schedule(running, alice.user, cron="* * * * *", alert_after_missed=1)
    for minute in range(1, 6):
        tick_at(f"2026-11-22 10:0{minute}:30")
    assert len(runs()) == 5
    assert "command_schedule.alert" not in events_of(published)


def test_two_ticks_at_once_run_a_slot_once(running, alice):
    make_schedule(running, alice.user)
    tick_at("2026-11-22 10:05:20")
    tick_at("2026-11-22 10:05:20")
    assert len(runs()) == 1


def test_a_disabled_schedule_does_not_run(running, alice):
    schedule = make_schedule(running, alice.user)
    with freeze_time("2026-11-22 10:01:00"):
        schedule_set_enabled(schedule=schedule, enabled=False, actor=SYSTEM)
    tick_at("2026-11-22 10:30:00")
    assert runs() == []


def test_enabling_again_plans_from_now_without_catching_up(running, alice, published):
    schedule = make_schedule(running, alice.user)
    with freeze_time("2026-11-22 10:01:00"):
        schedule_set_enabled(schedule=schedule, enabled=False, actor=SYSTEM)
    with freeze_time("2026-11-22 11:02:00"):
        schedule = schedule_set_enabled(schedule=schedule, enabled=True, actor=SYSTEM)
    assert schedule.next_run_at.isoformat() == "2026-11-22T11:05:00+00:00"
    tick_at("2026-11-22 11:05:10")
    assert len(runs()) == 1
    assert "command_schedule.alert" not in events_of(published)


@pytest.mark.parametrize("cron", ["* * * *", "61 * * * *", "every minute", "* * * * * *"])
def test_a_bad_cron_is_refused(running, alice, cron):
    with pytest.raises(InvalidSchedule):
        make_schedule(running, alice.user, cron=cron)


def test_the_minute_tick_is_registered_with_the_task_queue(db):
    task = QSchedule.objects.get(func="servers.tasks.tick")
    assert (task.schedule_type, task.minutes, task.repeats) == ("I", 1, -1)


# The API: list and Run Now.


def test_it_lists_a_servers_schedules(make_key, running, alice):
    schedule = make_schedule(running, alice.user, alert_on=("failed",))
    body = client_for(make_key(["schedules:read"])).get(f"{API}/servers/{running.id}/schedules")
    [listed] = body.json()["results"]
    assert listed == {
        "id": schedule.id,
        "server_id": running.id,
        "name": "Autosave",
        "cron": "*/5 * * * *",
        "command": "save-all",
        "enabled": True,
        "alert_on": ["failed"],
        "alert_after_missed": 3,
        "next_run_at": "2026-11-22T10:05:00.000Z",
        "last_run_at": None,
        "created_at": "2026-11-22T10:00:00.000Z",
    }


def test_run_now_answers_202_with_the_run(make_key, running, alice, published):
    schedule = make_schedule(running, alice.user)
    published.clear()
    response = client_for(make_key(["schedules:execute"])).post(
        f"{API}/servers/{running.id}/schedules/{schedule.id}/run"
    )
    assert response.status_code == 202
    body = response.json()
    assert (body["trigger"], body["status"], body["scheduled_for"]) == (
        "run_now",
        "succeeded",
        None,
    )
    assert body["schedule_id"] == schedule.id and body["id"].startswith("run_")
    assert published[0].data["trigger"] == "run_now"


def test_run_now_on_a_stopped_server_is_a_skipped_run_not_a_conflict(make_key, acme_server, alice):
    schedule = make_schedule(acme_server, alice.user)
    response = client_for(make_key(["schedules:execute"])).post(
        f"{API}/servers/{acme_server.id}/schedules/{schedule.id}/run"
    )
    assert (response.status_code, response.json()["status"]) == (202, "skipped")


def test_run_now_leaves_the_timing_alone(make_key, running, alice):
    schedule = make_schedule(running, alice.user)
    client_for(make_key(["schedules:execute"])).post(
        f"{API}/servers/{running.id}/schedules/{schedule.id}/run"
    )
    schedule.refresh_from_db()
    assert schedule.next_run_at.isoformat() == "2026-11-22T10:05:00+00:00"


def test_run_now_needs_schedules_execute(make_key, running, alice):
    schedule = make_schedule(running, alice.user)
    response = client_for(make_key(["schedules:read"])).post(
        f"{API}/servers/{running.id}/schedules/{schedule.id}/run"
    )
    assert error_of(response)["required_scope"] == "schedules:execute"


def test_another_servers_schedule_is_404_not_found(make_key, running, acme_other_server, alice):
    schedule = make_schedule(running, alice.user)
    response = client_for(make_key(["schedules:execute"])).post(
        f"{API}/servers/{acme_other_server.id}/schedules/{schedule.id}/run"
    )
    assert (response.status_code, error_of(response)["code"]) == (404, "not_found")
