"""A follow-up that could not be queued (broker down) costs the caller nothing, and the
catch-up the delivery engine's timer runs finishes the overdue transition from the rows."""

from typing import Any

import pytest
from freezegun import freeze_time

from gshost import handoff
from servers import recovery
from servers.models import Server
from tests.conftest import API, KeyMaker, client_for


def broker_down(*args: Any) -> None:
    raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


def test_a_power_action_answers_202_when_its_follow_up_cannot_be_queued(
    make_key: KeyMaker,
    acme_server: Server,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    monkeypatch.setattr("servers.simulated_runtime.async_task", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(make_key(["servers:power"])).post(
            f"{API}/servers/{acme_server.id}/power", {"action": "start"}, format="json"
        )

    assert response.status_code == 202
    assert Server.objects.get(id=acme_server.id).state == "starting"
    assert handoff.failed_count() == 1


def test_the_catch_up_finishes_a_start_whose_follow_up_was_lost(
    make_key: KeyMaker,
    acme_server: Server,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.SIMULATED_RUNTIME_DELAY_SECONDS = 2
    monkeypatch.setattr("servers.simulated_runtime.async_task", broker_down)
    with freeze_time("2026-11-22 10:00:00") as frozen:
        with django_capture_on_commit_callbacks(execute=True):
            client_for(make_key(["servers:power"])).post(
                f"{API}/servers/{acme_server.id}/power", {"action": "start"}, format="json"
            )
        frozen.tick(2)

        recovery.finish_overdue_work()

    assert Server.objects.get(id=acme_server.id).state == "running"


def test_the_engine_timer_runs_the_servers_catch_up() -> None:
    assert recovery.finish_overdue_work in handoff.catch_ups()
