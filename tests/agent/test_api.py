"""The agent's HTTPS API: who may call it, and what it refuses before touching anything."""

from __future__ import annotations

import http.client
import json
import ssl

import pytest
import requests

from tests.agent.conftest import TOKEN


@pytest.fixture
def agent(module_agent):
    return module_agent


def test_it_answers_the_node_with_its_games(agent):
    answer = agent.request("GET", "/v1/node")
    assert answer.status_code == 200
    assert {"demo", "freeciv"} <= set(answer.json()["games"])


@pytest.mark.parametrize("token", ["", "gsn_wrong", TOKEN + "x", TOKEN[:-1]])
def test_it_refuses_a_bad_token_with_401(agent, token):
    answer = agent.request("GET", "/v1/node", token=token)
    assert answer.status_code == 401
    assert answer.json() == {
        "error": {"code": "unauthorized", "message": "a valid node token is required"}
    }


def test_it_refuses_a_request_without_authorization(agent):
    answer = requests.get(agent.url + "/v1/node", verify=str(agent.ca), timeout=10)
    assert answer.status_code == 401


def test_it_touches_nothing_for_a_bad_token(agent):
    body = {"game": "demo", "port": 27998, "memory_mb": 256}
    answer = agent.request("POST", "/v1/servers/srv_00000000000000000bad/start", body, "no")
    assert answer.status_code == 401
    assert not (agent.data_dir / "servers" / "srv_00000000000000000bad").exists()
    assert not (agent.data_dir / "run" / "srv_00000000000000000bad").exists()


def test_it_answers_401_before_404_for_an_unknown_route(agent):
    assert agent.request("GET", "/v1/nothing", token="no").status_code == 401


@pytest.mark.parametrize(
    "path",
    [
        "/v1/servers/srv_../console",
        "/v1/servers/..%2F..%2Frun/console",
        "/v1/servers/srv_short/console",
        "/v1/servers/SRV_00000000000000000000/console",
        "/v1/servers/srv_0000000000000000000-/console",
        "/v1/servers/srv_00000000000000000000%0A/console",  # a trailing newline: no whole match
    ],
)
def test_it_answers_404_for_a_malformed_server_id(agent, path):
    answer = agent.request("GET", path)
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    "path",
    ["/v1/servers/../console", "/v1/servers/srv_../../run/console", "/v1/servers/%2e%2e/console"],
)
def test_it_answers_404_for_a_dot_dot_path_sent_as_is(agent, path):
    # http.client sends the path as given: no client-side normalisation of "..".
    connection = http.client.HTTPSConnection(
        "127.0.0.1", agent.port, context=ssl.create_default_context(cafile=str(agent.ca))
    )
    connection.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})
    answer = connection.getresponse()
    assert answer.status == 404
    assert json.loads(answer.read())["error"]["code"] == "not_found"
    connection.close()


def test_it_refuses_a_body_over_64_kib_with_413(agent):
    body = {"command": "x" * (65 * 1024)}
    answer = agent.request("POST", "/v1/servers/srv_0000000000000000000a/console", body)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "payload_too_large"


def test_it_refuses_a_body_that_is_not_an_object(agent):
    answer = agent.request("POST", "/v1/servers/srv_0000000000000000000a/start", [1])
    assert answer.status_code == 400


def test_it_refuses_an_unknown_game(agent):
    body = {"game": "quake", "port": 27997, "memory_mb": 256}
    answer = agent.request("POST", "/v1/servers/srv_0000000000000000000b/start", body)
    assert answer.status_code == 400
    assert "quake" in answer.json()["error"]["message"]


def test_it_speaks_https_only(agent):
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{agent.port}/v1/node", timeout=5)


def test_it_refuses_a_token_of_undecodable_bytes_with_401(agent):
    connection = http.client.HTTPSConnection(
        "127.0.0.1", agent.port, context=ssl.create_default_context(cafile=str(agent.ca))
    )
    connection.putrequest("GET", "/v1/node")
    connection.putheader("Authorization", b"Bearer \xff\xfe" + TOKEN.encode())
    connection.endheaders()
    answer = connection.getresponse()
    assert answer.status == 401
    assert answer.getheader("WWW-Authenticate", "").startswith("Bearer")
    connection.close()


@pytest.fixture(scope="module")
def known(module_agent, module_control_plane):
    server_id, _ = module_agent.start_server()
    module_control_plane.wait_for_report(server_id, "ready")
    return server_id


@pytest.mark.parametrize(
    "query",
    [
        "console?after=%C2%B2",  # a digit to str.isdigit, not to int()
        "console?after=" + "9" * 5000,
        "console?after=-1",
        "metrics?step=%C2%B2",
        "metrics?step=0",
        "metrics?step=" + "9" * 30,
    ],
)
def test_it_answers_400_for_a_number_out_of_bounds_in_a_query(agent, known, query):
    answer = agent.request("GET", f"/v1/servers/{known}/{query}")
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory_mb", 1 << 40),
        ("disk_mb", 0),
        ("cpu_percent", 0),
        ("processes", True),
        ("processes", 1 << 40),
    ],
)
def test_it_refuses_a_plan_out_of_bounds(agent, field, value):
    body = {"game": "demo", "port": 27998, "memory_mb": 256, field: value}
    answer = agent.request("POST", "/v1/servers/srv_0000000000000000plan/start", body)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith(f"{field}: an integer from")
