"""A node's capacity and games: from `createnode`, else from its agent's heartbeat (its
machine at the first one; what staff set stays); the games are the templates it lists."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from servers.game.registry import games_of
from servers.models import Node

HEARTBEAT = "/internal/nodes/heartbeat"
MACHINE = {"memory_mb": 32000, "disk_mb": 500000, "cpu_percent": 800}


def heartbeat(token, **fields):
    body = {"agent_version": "1", "outbox_id": "box-1", "servers": {}, **fields}
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    return Client().post(HEARTBEAT, json.dumps(body), content_type="application/json", **headers)


def createnode(*args):
    call_command(
        "createnode", "node-a", "--url", "https://10.0.0.5:8444", "--address", "203.0.113.5",
        *args, stdout=StringIO(),
    )  # fmt: skip
    return Node.objects.get(name="node-a")


def capacity(node):
    node.refresh_from_db()
    return node.memory_mb, node.disk_mb, node.cpu_percent


def test_createnode_takes_the_capacity_overallocation_and_tags(db):
    node = createnode(
        "--memory", "16384", "--disk", "200000", "--cpu", "400", "--overallocate", "25",
        "--tags", "ssd,EU",
    )  # fmt: skip
    assert capacity(node) == (16384, 200000, 400)
    assert (node.overallocate_percent, node.tags) == (25, ["eu", "ssd"])


def test_createnode_refuses_a_bad_tag(db):
    with pytest.raises(CommandError, match="Tags are at most"):
        createnode("--tags", "no spaces")


def test_the_first_heartbeat_gives_the_machines_capacity(agent_node, node_token):
    assert heartbeat(node_token, capacity=MACHINE).status_code == 200
    assert capacity(agent_node) == (32000, 500000, 800)


def test_a_capacity_staff_set_stays_whatever_the_machine_says(agent_node, node_token):
    Node.objects.filter(id=agent_node.id).update(memory_mb=4096)
    heartbeat(node_token, capacity=MACHINE)
    assert capacity(agent_node) == (4096, 500000, 800)


def test_a_later_heartbeat_does_not_change_the_capacity(agent_node, node_token):
    heartbeat(node_token, capacity=MACHINE)
    heartbeat(node_token, capacity={"memory_mb": 1, "disk_mb": 1, "cpu_percent": 1})
    assert capacity(agent_node) == (32000, 500000, 800)


def test_the_node_offers_the_games_its_heartbeat_lists(agent_node, node_token):
    heartbeat(node_token, games=["mygame", "demo"])
    agent_node.refresh_from_db()
    assert games_of(agent_node) == ("demo", "mygame")


@pytest.mark.parametrize(
    "fields",
    [
        {"games": "demo"},
        {"games": ["Not A Name"]},
        {"capacity": {"memory_mb": -1}},
        {"capacity": {"memory_mb": "lots"}},
        {"capacity": [1]},
    ],
)
def test_a_heartbeat_with_bad_games_or_capacity_is_400(agent_node, node_token, fields):
    assert heartbeat(node_token, **fields).status_code == 400


def test_a_heartbeat_keeps_the_node_online_when_the_cache_is_down(
    demo_server, node_token, monkeypatch
):
    tried = []

    def down(*args, **kwargs):
        tried.append(args)
        raise ConnectionRefusedError()

    monkeypatch.setattr("servers.agents.last_readings.cache.set", down)
    reading = {
        "sampled_at": "2026-11-27T10:00:00Z", "cpu_percent": 1, "memory_mb": 1,
        "memory_limit_mb": 1024, "disk_mb": 1, "players_online": 0, "uptime_seconds": 1,
    }  # fmt: skip
    assert heartbeat(node_token, readings={demo_server.id: reading}).status_code == 200
    assert tried


def test_the_node_keeps_the_isolation_its_heartbeat_tells(agent_node, node_token):
    heartbeat(node_token, isolation="bubblewrap, cgroup v1")
    agent_node.refresh_from_db()
    assert agent_node.isolation == "bubblewrap, cgroup v1"
