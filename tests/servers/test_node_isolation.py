"""A node's isolation is what its agent's heartbeat says (Django admin shows it)."""

import json

from django.test import Client

from servers.models import Node

HEARTBEAT = "/internal/nodes/heartbeat"
SANDBOXED = "sandboxed: namespaces (pid, ipc, mount, net), cgroups, own uid/gid"


def heartbeat(token, **fields):
    body = {"agent_version": "1", "outbox_id": "box-1", "servers": {}, **fields}
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    return Client().post(HEARTBEAT, json.dumps(body), content_type="application/json", **headers)


def test_the_heartbeat_sets_the_nodes_isolation(agent_node, node_token):
    assert heartbeat(node_token, isolation=SANDBOXED).status_code == 200

    assert Node.objects.get(id=agent_node.id).isolation == SANDBOXED


def test_a_heartbeat_without_isolation_keeps_the_last_one_said(agent_node, node_token):
    heartbeat(node_token, isolation=SANDBOXED)
    heartbeat(node_token)

    assert Node.objects.get(id=agent_node.id).isolation == SANDBOXED


def test_an_isolation_that_is_not_a_short_line_is_refused_naming_the_field(agent_node, node_token):
    answer = heartbeat(node_token, isolation="x" * 101)

    assert answer.status_code == 400
    assert "isolation" in answer.json()["error"]["message"]
    assert Node.objects.get(id=agent_node.id).isolation == ""
