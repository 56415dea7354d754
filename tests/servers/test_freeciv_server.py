"""A freeciv server on an agent node, as the control plane sees it (a stand-in agent): created
with `createserver --game freeciv --node`, started with freeciv's settings, stopped by `quit`."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from servers.models import Server
from tests.conftest import API, client_for

FREECIV_DEFAULTS = {"maxplayers": "20", "aifill": "0", "timeout": "0"}


@pytest.fixture
def freeciv_server(acme, agent_node):
    out = StringIO()
    call_command("createserver", "acme", "Civ", "--game", "freeciv", "--node", "node-1", stdout=out)
    return Server.objects.select_related("node").get(id=out.getvalue().strip())


@pytest.fixture
def client(make_key):
    return client_for(make_key(["servers:power", "console:write", "servers:read"]))


def test_createserver_puts_freeciv_on_the_agent_node(freeciv_server):
    assert (freeciv_server.game, freeciv_server.node.name, freeciv_server.port) == (
        "freeciv",
        "node-1",
        27000,
    )


def test_a_start_asks_the_agent_for_freeciv_with_its_settings(
    client, freeciv_server, stand_in_agent
):
    response = client.post(
        f"{API}/servers/{freeciv_server.id}/power", {"action": "start"}, format="json"
    )
    assert response.status_code == 202
    (call,) = stand_in_agent.calls("POST")
    assert call.path == f"/v1/servers/{freeciv_server.id}/start"
    assert call.body == {
        "game": "freeciv",
        "port": 27000,
        "memory_mb": 1024,
        "disk_mb": 10240,
        "cpu_percent": 100,
        "processes": 256,
        "settings": FREECIV_DEFAULTS,
    }


def test_quit_on_the_console_makes_it_stopping(
    client, freeciv_server, stand_in_agent, put_in_state
):
    put_in_state(freeciv_server, "running")
    response = client.post(
        f"{API}/servers/{freeciv_server.id}/console", {"command": "quit"}, format="json"
    )
    assert response.status_code == 202
    assert Server.objects.get(id=freeciv_server.id).state == "stopping"
    assert stand_in_agent.calls("POST")[-1].body == {"command": "quit"}


def test_its_settings_file_on_the_node_is_in_sync(client, freeciv_server, node_token):
    heartbeat = {
        "agent_version": "1", "outbox_id": "box-1", "servers": {},
        "readings": {freeciv_server.id: {"settings": FREECIV_DEFAULTS}},
    }  # fmt: skip
    Client().post(
        "/internal/nodes/heartbeat", json.dumps(heartbeat), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {node_token}",
    )  # fmt: skip
    body = client.get(f"{API}/servers/{freeciv_server.id}/settings/drift").json()
    assert body["in_sync"] is True
