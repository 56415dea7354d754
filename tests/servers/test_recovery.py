"""A follow-up that could not be queued (broker down) costs the caller nothing, and the
catch-up thread of each worker finishes the overdue transition from the rows."""

import threading
from typing import Any

import pytest
from django_q.signals import post_spawn
from freezegun import freeze_time

from gshost import process_state
from servers import recovery
from servers.models import Server
from servers.recovery import catch_up_until, start_catch_up
from tests.conftest import API, KeyMaker, client_for
from tests.metric_samples import sample
from tests.webhooks.delivery_fixtures import wait_for

FAILED = "gshost_handoffs_failed_total"


def broker_down(*args: Any) -> None:
    raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


def test_a_power_action_answers_202_when_its_follow_up_cannot_be_queued(
    make_key: KeyMaker,
    acme_server: Server,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    monkeypatch.setattr("servers.simulated.host.async_task", broker_down)
    before = sample(FAILED, task="servers.tasks.runtime_follow")
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(make_key(["servers:power"])).post(
            f"{API}/servers/{acme_server.id}/power", {"action": "start"}, format="json"
        )

    assert response.status_code == 202
    assert Server.objects.get(id=acme_server.id).state == "starting"
    assert sample(FAILED, task="servers.tasks.runtime_follow") == before + 1


def test_the_catch_up_finishes_a_start_whose_follow_up_was_lost(
    make_key: KeyMaker,
    acme_server: Server,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.SIMULATED_RUNTIME_DELAY_SECONDS = 2
    monkeypatch.setattr("servers.simulated.host.async_task", broker_down)
    with freeze_time("2026-11-22 10:00:00") as frozen:
        with django_capture_on_commit_callbacks(execute=True):
            client_for(make_key(["servers:power"])).post(
                f"{API}/servers/{acme_server.id}/power", {"action": "start"}, format="json"
            )
        frozen.tick(2)

        recovery.finish_overdue_work()

    assert Server.objects.get(id=acme_server.id).state == "running"


@pytest.mark.django_db(transaction=True)
def test_the_catch_up_thread_finishes_a_start_whose_follow_up_was_lost(
    make_key: KeyMaker,
    acme_server: Server,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    settings.SIMULATED_RUNTIME_DELAY_SECONDS = 0
    monkeypatch.setattr("servers.simulated.host.async_task", broker_down)
    client_for(make_key(["servers:power"])).post(
        f"{API}/servers/{acme_server.id}/power", {"action": "start"}, format="json"
    )
    stop = threading.Event()
    catch_up = threading.Thread(target=catch_up_until, args=(stop, 0.05))
    catch_up.start()
    try:
        wait_for(lambda: Server.objects.get(id=acme_server.id).state == "running", timeout=10)
    finally:
        stop.set()
        catch_up.join()


def test_each_worker_process_starts_the_catch_up_thread() -> None:
    receivers = [reference() for _key, reference, *_ in post_spawn.receivers]
    assert start_catch_up in receivers


def test_a_process_runs_one_catch_up_thread_however_often_it_is_spawned_and_reset_stops_it() -> (
    None
):
    def catch_up_threads() -> list[threading.Thread]:
        return [thread for thread in threading.enumerate() if thread.name == "servers-catch-up"]

    start_catch_up()
    start_catch_up()
    assert len(catch_up_threads()) == 1

    process_state.reset_all()

    assert catch_up_threads() == []
