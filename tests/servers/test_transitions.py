"""Applying the state machine: compare-and-set, a recorded transition, and exactly the events
each move fires (and none for the moves that fire none)."""

import pytest
from freezegun import freeze_time

from servers.errors import InvalidState
from servers.lifecycle import Trigger
from servers.models import Server, ServerTransition
from servers.services import server_transition
from tests.servers.conftest import Published, events_of


def apply(server, trigger, exit_code=None):
    return server_transition(
        server_id=server.id, trigger=trigger, cause="test", exit_code=exit_code
    )


@pytest.mark.parametrize(
    ("state", "trigger", "target"),
    [
        ("stopped", Trigger.START, "starting"),
        ("starting", Trigger.READY, "running"),
        ("starting", Trigger.FAILED_TO_START, "stopped"),
        ("running", Trigger.STOP, "stopping"),
        ("stopping", Trigger.HALTED, "stopped"),
        ("running", Trigger.RESTART, "restarting"),
        ("restarting", Trigger.READY, "running"),
        ("running", Trigger.CRASH, "stopped"),
        ("restarting", Trigger.CRASH, "stopped"),
    ],
)
def test_it_applies_every_transition(acme_server, put_in_state, state, trigger, target):
    put_in_state(acme_server, state)
    apply(acme_server, trigger, exit_code=1)
    assert Server.objects.get(id=acme_server.id).state == target


def test_it_records_every_transition(acme_server, put_in_state):
    with freeze_time("2026-11-22 10:00:00"):
        put_in_state(acme_server, "running")
        apply(acme_server, Trigger.CRASH, exit_code=137)
    rows = ServerTransition.objects.filter(server=acme_server).order_by("id")
    assert [(r.from_state, r.to_state, r.trigger) for r in rows] == [
        ("stopped", "starting", "start"),
        ("starting", "running", "ready"),
        ("running", "stopped", "crash"),
    ]
    assert rows.last().exit_code == 137
    assert all(r.cause == "test" and r.at.year == 2026 for r in rows)


def test_it_stamps_when_the_state_changed(acme_server):
    with freeze_time("2026-11-22 10:00:00"):
        server = apply(acme_server, Trigger.START)
    assert server.state_changed_at.isoformat() == "2026-11-22T10:00:00+00:00"


@pytest.mark.parametrize(
    ("state", "trigger"),
    [("stopped", Trigger.STOP), ("running", Trigger.START), ("stopping", Trigger.RESTART)],
)
def test_it_refuses_a_move_the_state_does_not_allow(acme_server, put_in_state, state, trigger):
    put_in_state(acme_server, state)
    with pytest.raises(InvalidState) as refused:
        apply(acme_server, trigger)
    assert refused.value.extra["state"] == state


def test_it_acts_only_when_its_compare_and_set_wins(acme_server, monkeypatch):
    """Another process moved the server between our read and our update."""
    real_get = Server.objects.get

    def stale_get(**kwargs):
        server = real_get(**kwargs)
        Server.objects.filter(id=server.id).update(state="running")
        return server

    monkeypatch.setattr(Server.objects, "get", stale_get)
    with pytest.raises(InvalidState) as refused:
        apply(acme_server, Trigger.START)
    assert refused.value.extra["state"] == "running"
    assert not ServerTransition.objects.filter(server=acme_server).exists()


def test_it_fires_nothing_on_start_stop_or_restart_requests(acme_server, put_in_state, published):
    put_in_state(acme_server, "running")
    published.clear()
    apply(acme_server, Trigger.RESTART)
    apply(acme_server, Trigger.READY)
    published.clear()
    apply(acme_server, Trigger.STOP)
    assert published == []


def test_it_fires_started_when_a_start_completes(acme_server, put_in_state, published):
    put_in_state(acme_server, "running")
    assert published == [
        Published("server.started", acme_server.id, {"previous_state": "starting"})
    ]


def test_it_fires_stopped_when_a_stop_completes(acme_server, put_in_state, published):
    put_in_state(acme_server, "stopping")
    published.clear()
    apply(acme_server, Trigger.HALTED)
    assert published == [
        Published("server.stopped", acme_server.id, {"previous_state": "stopping"})
    ]


def test_it_fires_only_restarted_when_a_restart_completes(acme_server, put_in_state, published):
    put_in_state(acme_server, "restarting")
    published.clear()
    apply(acme_server, Trigger.READY)
    assert published == [Published("server.restarted", acme_server.id, {})]


def test_it_fires_only_crashed_when_a_running_server_crashes(acme_server, put_in_state, published):
    put_in_state(acme_server, "running")
    published.clear()
    apply(acme_server, Trigger.CRASH, exit_code=137)
    assert published == [
        Published(
            "server.crashed",
            acme_server.id,
            {"reason": "exited", "exit_code": 137, "will_restart": False},
        )
    ]


def test_it_fires_only_crashed_when_a_restart_crashes(acme_server, put_in_state, published):
    put_in_state(acme_server, "restarting")
    published.clear()
    apply(acme_server, Trigger.CRASH, exit_code=1)
    assert events_of(published) == ["server.crashed"]


def test_it_fires_crashed_when_a_start_fails(acme_server, put_in_state, published):
    put_in_state(acme_server, "starting")
    apply(acme_server, Trigger.FAILED_TO_START)
    assert published == [
        Published(
            "server.crashed",
            acme_server.id,
            {"reason": "failed_to_start", "exit_code": None, "will_restart": False},
        )
    ]


def test_a_refused_move_fires_nothing(acme_server, published):
    with pytest.raises(Exception):  # noqa: B017
        apply(acme_server, Trigger.STOP)
    assert published == []
