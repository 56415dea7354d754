"""The simulated node, through the one runtime: its agent in process finishes requests after
SIMULATED_RUNTIME_DELAY_SECONDS through the task queue (or the servers' minute tick, if a task
is lost) and invents deterministic readings."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from django_q.conf import Conf
from freezegun import freeze_time

from audit.actors import Actor
from servers import tasks
from servers.models import Server
from servers.runtime import get_runtime, runtime_sweep
from servers.services import PowerAction, server_power
from tests.servers.conftest import events_of

ME = Actor.system("test")


def power(server, action):
    return server_power(server=server, action=PowerAction(action), actor=ME)


def state_of(server):
    return Server.objects.get(id=server.id).state


def sweep():
    runtime_sweep(timezone.now())


def test_it_completes_a_start_only_after_the_delay(acme_server, settings):
    settings.SIMULATED_RUNTIME_DELAY_SECONDS = 2
    with freeze_time("2026-11-22 10:00:00") as frozen:
        power(acme_server, "start")
        frozen.tick(1.9)
        sweep()
        assert state_of(acme_server) == "starting"
        frozen.tick(0.1)
        sweep()
    assert state_of(acme_server) == "running"


def test_it_completes_a_stop(acme_server, put_in_state, published):
    put_in_state(acme_server, "running")
    published.clear()
    with freeze_time(timezone.now()) as frozen:
        power(acme_server, "stop")
        frozen.tick(3)
        sweep()
    assert state_of(acme_server) == "stopped"
    assert events_of(published) == ["server.stopped"]


def test_a_completed_restart_fires_restarted_and_not_started(acme_server, put_in_state, published):
    put_in_state(acme_server, "running")
    published.clear()
    with freeze_time(timezone.now()) as frozen:
        power(acme_server, "restart")
        frozen.tick(3)
        sweep()
    assert state_of(acme_server) == "running"
    assert events_of(published) == ["server.restarted"]


def test_a_second_sweep_changes_nothing(acme_server, published):
    with freeze_time(timezone.now()) as frozen:
        power(acme_server, "start")
        frozen.tick(3)
        sweep()
        sweep()
    assert events_of(published) == ["server.started"]


def test_the_minute_tick_finishes_what_a_lost_task_left(acme_server):
    with freeze_time(timezone.now()) as frozen:
        power(acme_server, "start")  # its follow-up task is never run
        frozen.tick(60)
        tasks.tick()
    assert state_of(acme_server) == "running"


def test_it_queues_its_follow_up_when_the_request_commits(
    acme_server, monkeypatch, django_capture_on_commit_callbacks
):
    queued = []
    monkeypatch.setattr("servers.simulated.host.async_task", lambda *a: queued.append(a))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        power(acme_server, "start")
    assert queued == []
    for callback in callbacks:
        callback()
    assert [name for name, _until in queued] == ["servers.tasks.runtime_follow"]


def test_the_follow_up_task_finishes_the_request_through_the_queue(
    acme_server, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.SIMULATED_RUNTIME_DELAY_SECONDS = 0
    monkeypatch.setattr(Conf, "SYNC", True)
    with django_capture_on_commit_callbacks(execute=True):
        power(acme_server, "start")
    assert state_of(acme_server) == "running"


def test_a_server_takes_its_desired_settings_when_it_starts(acme_server, put_in_state):
    Server.objects.filter(id=acme_server.id).update(desired_settings={"max_players": "7"})
    with freeze_time(timezone.now()) as frozen:
        power(acme_server, "start")
        frozen.tick(3)
        sweep()
    assert Server.objects.get(id=acme_server.id).reported_settings["max_players"] == "7"


@pytest.fixture
def long_running(acme_server, put_in_state):
    with freeze_time("2026-11-22 06:00:00"):
        put_in_state(acme_server, "running")
    return Server.objects.get(id=acme_server.id)


def test_it_invents_the_same_players_for_the_same_moment(long_running):
    moment = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    runtime = get_runtime(long_running)
    assert runtime.players(long_running, moment) == runtime.players(long_running, moment)


def test_players_joined_after_the_server_started_and_before_now(long_running):
    moment = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    listed = get_runtime(long_running).players(long_running, moment)
    assert listed.count == len(listed.players) > 0
    assert all(long_running.state_changed_at <= p.joined_at <= moment for p in listed.players)


def test_no_more_players_than_the_server_allows(long_running):
    long_running.reported_settings = {"max_players": "1"}
    moment = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    listed = get_runtime(long_running).players(long_running, moment)
    assert listed.max == 1 and listed.count <= 1


def test_a_stopped_server_has_no_players_and_no_load(acme_server):
    runtime, now = get_runtime(acme_server), timezone.now()
    assert runtime.players(acme_server, now).count == 0
    stats = runtime.stats(acme_server, now)
    assert (stats.cpu_percent, stats.memory_mb, stats.uptime_seconds) == (0.0, 0, 0)


def test_a_running_server_has_load_and_uptime(long_running):
    moment = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    stats = get_runtime(long_running).stats(long_running, moment)
    assert stats.cpu_percent > 0 and 0 < stats.memory_mb <= stats.memory_limit_mb
    assert stats.uptime_seconds == 6 * 3600
    assert stats == get_runtime(long_running).stats(long_running, moment)


def test_metrics_follow_the_servers_state_history(acme_server, put_in_state):
    with freeze_time("2026-11-22 10:30:00"):
        put_in_state(acme_server, "running")
    end = datetime(2026, 11, 22, 11, 0, tzinfo=UTC)
    samples = get_runtime(acme_server).metrics(
        acme_server, end - timedelta(hours=1), end, timedelta(minutes=1)
    )
    assert len(samples) == 61
    assert all(s.cpu_percent == 0 for s in samples if s.at < samples[30].at)
    assert all(s.cpu_percent > 0 for s in samples[31:])


def test_an_unknown_minecraft_command_is_refused_by_the_game(long_running):
    assert not get_runtime(long_running).send_command(long_running, "fly me to the moon").accepted
    assert get_runtime(long_running).send_command(long_running, "say hello").accepted


def test_a_custom_game_accepts_any_command(acme_other_server):
    assert (
        get_runtime(acme_other_server).send_command(acme_other_server, "anything at all").accepted
    )


def test_the_simulated_nodes_sweep_leaves_a_server_on_an_agent_node_alone(
    demo_server, put_in_state
):
    with freeze_time(timezone.now()) as frozen:
        put_in_state(demo_server, "starting")
        frozen.tick(20)  # long past SIMULATED_RUNTIME_DELAY_SECONDS: only its agent says ready
        sweep()
    assert state_of(demo_server) == "starting"
