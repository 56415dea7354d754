"""POST /servers/{id}/power and /console through the API."""

import re

import pytest

from servers.models import ConsoleCommand, Server
from tests.conftest import API, client_for, error_of
from tests.servers.conftest import Published

TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


def power(key, server, action):
    return client_for(key).post(
        f"{API}/servers/{server.id}/power", {"action": action}, format="json"
    )


def console(key, server, command):
    return client_for(key).post(
        f"{API}/servers/{server.id}/console", {"command": command}, format="json"
    )


def test_it_accepts_a_start_and_answers_202_with_the_server(make_key, acme_server):
    response = power(make_key(["servers:power"]), acme_server, "start")
    assert response.status_code == 202
    assert response.json()["id"] == acme_server.id
    assert response.json()["state"] == "starting"
    assert set(response.json()) == {
        "id", "name", "game", "state", "address", "node", "plan", "restart_on_crash",
        "suspended", "created_at",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("state", "action"),
    [
        ("stopped", "stop"),
        ("stopped", "restart"),
        ("starting", "start"),
        ("running", "start"),
        ("stopping", "stop"),
        ("restarting", "restart"),
    ],
)
def test_a_power_action_the_state_forbids_is_409_with_the_state(
    make_key, acme_server, put_in_state, state, action
):
    put_in_state(acme_server, state)
    response = power(make_key(["servers:power"]), acme_server, action)
    assert response.status_code == 409
    error = error_of(response)
    assert (error["code"], error["state"]) == ("invalid_state", state)


@pytest.mark.parametrize("body", [{}, {"action": "explode"}, {"action": 1}])
def test_a_bad_power_action_is_400_naming_the_field(make_key, acme_server, body):
    response = client_for(make_key(["servers:power"])).post(
        f"{API}/servers/{acme_server.id}/power", body, format="json"
    )
    assert response.status_code == 400
    assert set(error_of(response)["fields"]) == {"action"}


def test_power_needs_servers_power(make_key, acme_server):
    response = power(make_key(["servers:read"]), acme_server, "start")
    assert response.status_code == 403
    assert error_of(response)["required_scope"] == "servers:power"
    assert Server.objects.get(id=acme_server.id).state == "stopped"


def test_it_sends_a_console_command_to_a_running_server(make_key, acme_server, put_in_state):
    put_in_state(acme_server, "running")
    response = console(make_key(["console:write"]), acme_server, "say hello")
    assert response.status_code == 202
    body = response.json()
    assert body["command"] == "say hello" and set(body) == {"command", "sent_at"}
    assert TIMESTAMP.fullmatch(body["sent_at"])
    assert ConsoleCommand.objects.get(server=acme_server).command == "say hello"


def test_a_console_command_fires_command_sent_with_the_key(
    make_key, acme_server, put_in_state, published
):
    put_in_state(acme_server, "running")
    published.clear()
    key = make_key(["console:write"])
    console(key, acme_server, "say hello")
    assert published == [
        Published(
            "console.command_sent",
            acme_server.id,
            {"command": "say hello", "source": "api", "key_id": key.key_id, "user": None},
        )
    ]


@pytest.mark.parametrize("state", ["stopped", "starting", "stopping", "restarting"])
def test_the_console_is_409_unless_running(make_key, acme_server, put_in_state, published, state):
    put_in_state(acme_server, state)
    published.clear()
    response = console(make_key(["console:write"]), acme_server, "say hello")
    assert response.status_code == 409
    assert error_of(response)["state"] == state
    assert published == []


@pytest.mark.parametrize("command", ["", "   ", "say a\nstop", "x" * 1001])
def test_a_bad_console_command_is_400(make_key, acme_server, put_in_state, command):
    put_in_state(acme_server, "running")
    response = console(make_key(["console:write"]), acme_server, command)
    assert response.status_code == 400
    assert set(error_of(response)["fields"]) == {"command"}


def test_the_console_needs_console_write(make_key, acme_server, put_in_state):
    put_in_state(acme_server, "running")
    response = console(make_key(["servers:power"]), acme_server, "say hello")
    assert response.status_code == 403
    assert error_of(response)["required_scope"] == "console:write"


def test_a_body_that_is_not_json_is_400(make_key, acme_server):
    response = client_for(make_key(["servers:power"])).post(
        f"{API}/servers/{acme_server.id}/power", "action=start", content_type="text/plain"
    )
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"


def test_the_wrong_method_is_405(make_key, acme_server):
    response = client_for(make_key(["servers:power"])).get(f"{API}/servers/{acme_server.id}/power")
    assert response.status_code == 405
