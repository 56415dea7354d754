"""Server reads: a key sees only its organization's servers, and only those it is restricted to;
anything else is a 404 server_not_found indistinguishable from a server that does not exist."""

import re

import pytest
from freezegun import freeze_time

from audit.actors import Actor
from servers.services import server_create
from tests.conftest import API, client_for, error_of

TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


def listed_ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [s["id"] for s in response.json()["results"]]


def test_it_lists_the_organizations_servers_newest_first(make_key, acme):
    key = make_key(["servers:read"])
    with freeze_time("2026-11-22 10:00:00") as frozen:
        first = server_create(actor=Actor.system("test"), organization=acme, name="one")
        frozen.tick(1)
        second = server_create(actor=Actor.system("test"), organization=acme, name="two")
    assert listed_ids(client_for(key).get(f"{API}/servers")) == [second.id, first.id]


def test_the_list_leaves_out_other_organizations_servers(make_key, acme_server, globex_server):
    key = make_key(["servers:read"])
    assert listed_ids(client_for(key).get(f"{API}/servers")) == [acme_server.id]


def test_a_restricted_key_lists_only_its_servers(make_key, acme_server, acme_other_server):
    key = make_key(["servers:read"], server_ids=[acme_other_server.id])
    assert listed_ids(client_for(key).get(f"{API}/servers")) == [acme_other_server.id]


def test_the_list_is_paginated(make_key, acme_server):
    body = client_for(make_key(["servers:read"])).get(f"{API}/servers").json()
    assert set(body) == {"results", "next", "previous"}


def test_it_returns_a_server_with_the_contract_fields(make_key, acme_server):
    response = client_for(make_key(["servers:read"])).get(f"{API}/servers/{acme_server.id}")
    assert response.status_code == 200
    body = response.json()
    assert body == {
        "id": acme_server.id,
        "name": "Survival",
        "game": "minecraft",
        "state": "stopped",
        "address": acme_server.address,
        "node": "simulated",
        "plan": {"memory_mb": 1024, "disk_mb": 10240, "cpu_percent": 100, "processes": 256},
        "restart_on_crash": True,
        "suspended": False,
        "created_at": body["created_at"],
    }
    assert TIMESTAMP.fullmatch(body["created_at"])
    assert re.fullmatch(r"srv_[0-9A-Za-z]{16,}", body["id"])


def test_listed_servers_have_the_same_shape_as_a_single_server(make_key, acme_server):
    client = client_for(make_key(["servers:read"]))
    [listed] = client.get(f"{API}/servers").json()["results"]
    assert listed == client.get(f"{API}/servers/{acme_server.id}").json()


def test_a_restricted_key_reads_a_server_on_its_list(make_key, acme_server):
    key = make_key(["servers:read"], server_ids=[acme_server.id])
    assert client_for(key).get(f"{API}/servers/{acme_server.id}").status_code == 200


@pytest.mark.parametrize("unknown", ["srv_doesNotExist00000000", "nothing-like-an-id"])
def test_an_unknown_server_is_server_not_found(make_key, unknown):
    response = client_for(make_key(["servers:read"])).get(f"{API}/servers/{unknown}")
    assert response.status_code == 404
    assert error_of(response)["code"] == "server_not_found"


def test_foreign_restricted_and_nonexistent_servers_get_byte_identical_answers(
    make_key, acme_server, acme_other_server, globex_server
):
    key = make_key(["servers:read"], server_ids=[acme_server.id])
    client = client_for(key)
    foreign = client.get(f"{API}/servers/{globex_server.id}")
    restricted = client.get(f"{API}/servers/{acme_other_server.id}")
    nonexistent = client.get(f"{API}/servers/srv_doesNotExist00000000")
    assert foreign.status_code == restricted.status_code == nonexistent.status_code == 404
    assert foreign.content == restricted.content == nonexistent.content
    assert foreign["Content-Type"] == restricted["Content-Type"] == nonexistent["Content-Type"]


def test_an_unrestricted_key_cannot_tell_a_foreign_server_from_a_missing_one(
    make_key, globex_server
):
    client = client_for(make_key(["servers:read"]))
    foreign = client.get(f"{API}/servers/{globex_server.id}")
    nonexistent = client.get(f"{API}/servers/srv_doesNotExist00000000")
    assert foreign.status_code == nonexistent.status_code == 404
    assert foreign.content == nonexistent.content


def test_reading_servers_needs_servers_read(make_key, acme_server):
    client = client_for(make_key(["keys:read"]))
    for path in ("/servers", f"/servers/{acme_server.id}"):
        response = client.get(f"{API}{path}")
        assert response.status_code == 403
        assert error_of(response)["required_scope"] == "servers:read"
