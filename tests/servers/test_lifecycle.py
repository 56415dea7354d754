"""The state machine table itself: every allowed move, and everything else refused."""

import itertools

import pytest

from servers.lifecycle import TABLE, Trigger, move
from servers.models import ServerState

EXPECTED = {
    ("stopped", "start"): ("starting", None),
    ("starting", "ready"): ("running", "server.started"),
    ("starting", "failed_to_start"): ("stopped", "server.crashed"),
    ("running", "stop"): ("stopping", None),
    ("stopping", "halted"): ("stopped", "server.stopped"),
    ("running", "restart"): ("restarting", None),
    ("restarting", "ready"): ("running", "server.restarted"),
    ("running", "crash"): ("stopped", "server.crashed"),
    ("restarting", "crash"): ("stopped", "server.crashed"),
    # A node stopping a game on its own: its agent shutting down, a restore (stopped_by_node).
    ("running", "node_stop"): ("stopping", None),
    ("starting", "node_stop"): ("stopping", None),
    ("restarting", "node_stop"): ("stopping", None),
    # A node starting a game again after a restore stopped it (started_by_node).
    ("stopped", "node_start"): ("starting", None),
    # A stop or restart the node did not take: back to running, as it was.
    ("stopping", "not_taken"): ("running", None),
    ("restarting", "not_taken"): ("running", None),
}


@pytest.mark.parametrize(("state", "trigger"), sorted(EXPECTED))
def test_it_allows_each_contract_move(state, trigger):
    step = move(state, Trigger(trigger))
    assert step is not None
    assert (step.target.value, step.event and step.event.value) == EXPECTED[(state, trigger)]


def test_it_has_no_move_beyond_the_contract():
    assert {(s.value, t.value) for s, t in TABLE} == set(EXPECTED)


@pytest.mark.parametrize(
    ("state", "trigger"),
    [
        (s.value, t.value)
        for s, t in itertools.product(ServerState, Trigger)
        if (s.value, t.value) not in EXPECTED
    ],
)
def test_it_refuses_every_other_move(state, trigger):
    assert move(state, Trigger(trigger)) is None


def test_it_fires_nothing_on_entering_a_transitional_state():
    for (state, trigger), (target, _event) in EXPECTED.items():
        if target in ("starting", "stopping", "restarting"):
            assert move(state, Trigger(trigger)).event is None


def test_it_gives_started_and_stopped_their_previous_state():
    assert move("starting", Trigger.READY).event_data() == {"previous_state": "starting"}
    assert move("stopping", Trigger.HALTED).event_data() == {"previous_state": "stopping"}


def test_it_gives_restarted_empty_data():
    assert move("restarting", Trigger.READY).event_data() == {}


def test_it_tells_a_crash_from_a_failed_start():
    assert move("running", Trigger.CRASH).event_data(137) == {
        "reason": "exited",
        "exit_code": 137,
        "will_restart": False,
    }
    assert move("starting", Trigger.FAILED_TO_START).event_data(None) == {
        "reason": "failed_to_start",
        "exit_code": None,
        "will_restart": False,
    }


def test_a_crash_says_whether_the_server_is_started_again():
    data = move("running", Trigger.CRASH).event_data(137, will_restart=True)
    assert data["will_restart"] is True
