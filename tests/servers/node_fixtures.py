"""Agent nodes for the tests: one registered against the HTTPS stand-in agent, and a demo
server on it."""

from typing import Any

import pytest
from django.utils import timezone

from accounts.models import Organization
from audit.actors import Actor
from servers.fleet.nodes import NodeInput, node_create
from servers.models import Node, Server
from servers.services import server_create
from tests.servers.agent_standin import StandInAgent, stand_in_agent

__all__ = ["stand_in_agent"]


def beat(node: Node) -> None:
    """A heartbeat now: the node is online for the next 30 s."""
    Node.objects.filter(id=node.id).update(last_heartbeat_at=timezone.now())
    node.last_heartbeat_at = timezone.now()


def register(name: str, **fields: Any) -> tuple[Node, str]:
    data = {"url": "https://127.0.0.1:8444", "address": "198.51.100.7", **fields}
    created = node_create(data=NodeInput(name=name, **data))
    return created.node, created.token


def online(
    name: str,
    *,
    memory: int = 8192,
    disk: int = 102400,
    games: tuple[str, ...] = ("demo", "freeciv"),
    **fields: Any,
) -> Node:
    """A registered agent node that has just sent its heartbeat: online, with that capacity
    (MB) and those games."""
    node, _token = register(name, **fields)
    Node.objects.filter(id=node.id).update(memory_mb=memory, disk_mb=disk, games=list(games))
    node.refresh_from_db()
    beat(node)
    return node


@pytest.fixture
def agent_node(db: None, stand_in_agent: StandInAgent) -> Node:
    node, token = register(
        "node-1", url=stand_in_agent.url, ports="27000-27002", ca_pem=stand_in_agent.ca_pem
    )
    stand_in_agent.token = token
    beat(node)
    return node


@pytest.fixture
def node_token(agent_node: Node, stand_in_agent: StandInAgent) -> str:
    return stand_in_agent.token


@pytest.fixture
def demo_server(acme: Organization, agent_node: Node) -> Server:
    return server_create(
        actor=Actor.system("test"), organization=acme, name="Demo", game="demo", node=agent_node
    )
