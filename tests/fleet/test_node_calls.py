"""Calls to nodes' agents: bounded in time, refused at once for a node that did not answer,
and one slow node costs nothing to calls about other nodes (servers.agents.calls)."""

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import trustme
from freezegun import freeze_time

from servers.agents import calls, runtime
from servers.agents.runtime import agent_call
from servers.errors import NodeUnavailable
from servers.models import Node
from tests.fleet.holding import HoldingListener
from tests.servers.agent_standin import StandInAgent
from tests.servers.node_fixtures import beat, register

STATS = "/v1/servers/srv_x/stats"


@pytest.fixture(autouse=True)
def short_deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules, with seconds the tests can afford (the real ones are 3, 10, 30 and 1)."""
    monkeypatch.setattr(runtime, "CONNECT_TIMEOUT_SECONDS", 0.3)
    monkeypatch.setattr(runtime, "DEADLINE_SECONDS", 0.5)
    monkeypatch.setattr(calls, "SLOW_AFTER_SECONDS", 0.05)


@pytest.fixture
def held_node(db: None, holding_listener: HoldingListener) -> Node:
    """An online node whose API takes connections and never answers."""
    node, _ = register(
        "held", url=holding_listener.url, ca_pem=trustme.CA().cert_pem.bytes().decode()
    )
    beat(node)
    return node


def unavailable(node: Node) -> NodeUnavailable:
    with pytest.raises(NodeUnavailable) as raised:
        agent_call(node, "GET", STATS)
    return raised.value


def test_the_real_deadline_is_3_s_to_connect_and_10_s_in_all() -> None:
    assert (calls.CONNECT_TIMEOUT_SECONDS, calls.DEADLINE_SECONDS) == (3.0, 10.0)


def test_a_call_to_a_node_that_never_answers_ends_at_the_deadline_as_503(
    held_node: Node, holding_listener: HoldingListener
) -> None:
    error = unavailable(held_node)
    assert error.code == "node_unavailable"
    assert error.extra["retry_after"] > 0
    assert holding_listener.connections == 1


def test_after_a_call_timed_out_the_node_answers_at_once_without_a_connection(
    held_node: Node, holding_listener: HoldingListener
) -> None:
    unavailable(held_node)
    error = unavailable(held_node)
    assert "did not answer" in error.message
    assert holding_listener.connections == 1


def test_after_the_fail_fast_window_the_node_is_tried_again(
    held_node: Node, holding_listener: HoldingListener
) -> None:
    with freeze_time() as frozen:
        unavailable(held_node)
        frozen.tick(calls.FAIL_FAST_SECONDS - 1)
        beat(held_node)
        unavailable(held_node)
        assert holding_listener.connections == 1
        frozen.tick(2)
        unavailable(held_node)
    assert holding_listener.connections == 2


def test_a_node_without_a_heartbeat_for_30_s_answers_at_once_without_a_connection(
    agent_node: Node, stand_in_agent: StandInAgent
) -> None:
    with freeze_time() as frozen:
        beat(agent_node)
        frozen.tick(31)
        error = unavailable(agent_node)
    assert "no heartbeat" in error.message
    assert stand_in_agent.requests == []


def test_four_slow_calls_at_once_hold_one_connection_and_all_end_as_503(
    held_node: Node, holding_listener: HoldingListener
) -> None:
    start = threading.Barrier(4)
    outcomes: list[Any] = []

    def call() -> None:
        start.wait()
        try:
            agent_call(held_node, "GET", STATS)
        except NodeUnavailable as error:
            outcomes.append(error.code)

    callers = [threading.Thread(target=call) for _ in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert outcomes == ["node_unavailable"] * 4
    assert holding_listener.connections == 1


def test_a_call_held_by_one_node_does_not_stop_calls_to_another(
    held_node: Node,
    holding_listener: HoldingListener,
    agent_node: Node,
    stand_in_agent: StandInAgent,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runtime, "DEADLINE_SECONDS", 30.0)
    stand_in_agent.answer("GET", STATS, 200, {"fine": True})
    held = threading.Thread(target=unavailable, args=(held_node,))
    held.start()
    assert holding_listener.took_one.wait(10)
    try:
        assert agent_call(agent_node, "GET", STATS) == {"fine": True}
        assert "has waited" in unavailable(held_node).message
        assert held.is_alive()  # the first caller is still waiting on its node
    finally:
        holding_listener.stop()  # its connection closes: the first caller ends now
        held.join()
    assert holding_listener.connections == 1


def test_when_redis_cannot_be_reached_calls_go_on_with_the_process_own_marks(
    held_node: Node,
    holding_listener: HoldingListener,
    agent_node: Node,
    stand_in_agent: StandInAgent,
    settings: Any,
) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    stand_in_agent.answer("GET", STATS, 200, {"fine": True})
    assert agent_call(agent_node, "GET", STATS) == {"fine": True}
    unavailable(held_node)
    assert "did not answer" in unavailable(held_node).message
    assert holding_listener.connections == 1


def test_calls_at_once_to_a_healthy_node_take_turns_and_all_get_through(
    agent_node: Node, stand_in_agent: StandInAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calls, "SLOW_AFTER_SECONDS", 1.0)  # the real one
    stand_in_agent.answer("GET", STATS, 200, {"fine": True})
    start = threading.Barrier(4)

    def call() -> dict[str, Any]:
        start.wait()
        return agent_call(agent_node, "GET", STATS)

    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda _: call(), range(4)))
    assert answers == [{"fine": True}] * 4
    assert len(stand_in_agent.calls("GET")) == 4
