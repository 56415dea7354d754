"""Fixtures for the server tests: every published event is captured (and still handed to the
webhooks app's publish function when it exists, so delivery rows are written too)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from servers.lifecycle import Trigger
from servers.models import Server
from servers.services import server_transition
from tests.servers.node_fixtures import agent_node, demo_server, node_token, stand_in_agent
from tests.servers.seaweedfs import bucket, seaweedfs
from tests.webhooks.delivery_fixtures import engine_settings_fixture, receiver_fixture
from webhooks import services as webhook_services

# The end-to-end test delivers to the webhook tests' HTTPS receiver through their settings.
__all__ = [
    "agent_node",
    "bucket",
    "demo_server",
    "engine_settings_fixture",
    "node_token",
    "receiver_fixture",
    "seaweedfs",
    "stand_in_agent",
]


@dataclass(frozen=True)
class Published:
    event: str
    server_id: str
    data: dict[str, Any]


@pytest.fixture(autouse=True)
def published(monkeypatch: pytest.MonkeyPatch) -> list[Published]:
    """Every event published, in order. The webhooks app's function still runs, so delivery
    rows are written as in production."""
    captured: list[Published] = []
    real = webhook_services.publish_event

    def capture(**kwargs: Any) -> list[Any]:
        captured.append(Published(str(kwargs["event"]), kwargs["server_id"], kwargs["data"]))
        return real(**kwargs)

    monkeypatch.setattr(webhook_services, "publish_event", capture)
    return captured


def events_of(published: list[Published]) -> list[str]:
    return [p.event for p in published]


MOVES_TO: dict[str, list[Trigger]] = {
    "stopped": [],
    "starting": [Trigger.START],
    "running": [Trigger.START, Trigger.READY],
    "stopping": [Trigger.START, Trigger.READY, Trigger.STOP],
    "restarting": [Trigger.START, Trigger.READY, Trigger.RESTART],
}


@pytest.fixture
def put_in_state() -> Callable[[Server, str], Server]:
    """Walk a server through the real state machine to `state`."""

    def put(server: Server, state: str) -> Server:
        for trigger in MOVES_TO[state]:
            server = server_transition(server_id=server.id, trigger=trigger, cause="test")
        return server

    return put
