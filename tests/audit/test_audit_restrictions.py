"""A key restricted to servers reads only audit rows with no server or one of its servers, and
filtering by any other server is 404 server_not_found."""

import pytest

from tests.conftest import API, client_for, error_of

AUDIT = f"{API}/account/audit"


@pytest.fixture
def traffic(make_key, acme_server, acme_other_server) -> None:
    """Calls on both servers and one on no server, by an unrestricted key."""
    caller = client_for(make_key(["servers:read"]))
    caller.get(f"{API}/servers/{acme_server.id}")
    caller.get(f"{API}/servers/{acme_other_server.id}")
    caller.get(f"{API}/servers")


def server_ids(response) -> set[str | None]:
    assert response.status_code == 200, response.content
    return {row["server_id"] for row in response.json()["results"]}


def test_a_restricted_key_reads_only_its_servers_and_serverless_rows(
    make_key, acme_server, acme_other_server, traffic
):
    reader = client_for(make_key(["audit:read"], server_ids=[acme_server.id]))
    assert server_ids(reader.get(AUDIT)) == {acme_server.id, None}


def test_a_restricted_key_filtering_by_another_server_gets_server_not_found(
    make_key, acme_server, acme_other_server, traffic
):
    reader = client_for(make_key(["audit:read"], server_ids=[acme_server.id]))
    response = reader.get(AUDIT, {"server_id": acme_other_server.id})
    assert response.status_code == 404
    assert error_of(response)["code"] == "server_not_found"


def test_the_refusal_is_the_same_as_for_a_server_that_does_not_exist(
    make_key, acme_server, acme_other_server, traffic
):
    reader = client_for(make_key(["audit:read"], server_ids=[acme_server.id]))
    other = reader.get(AUDIT, {"server_id": acme_other_server.id})
    missing = reader.get(AUDIT, {"server_id": "srv_doesNotExist00000000"})
    assert other.json() == missing.json()


def test_a_restricted_key_filters_by_its_own_server(make_key, acme_server, traffic):
    reader = client_for(make_key(["audit:read"], server_ids=[acme_server.id]))
    assert server_ids(reader.get(AUDIT, {"server_id": acme_server.id})) == {acme_server.id}


def test_an_unrestricted_key_reads_every_row(make_key, acme_server, acme_other_server, traffic):
    reader = client_for(make_key(["audit:read"]))
    assert server_ids(reader.get(AUDIT)) == {acme_server.id, acme_other_server.id, None}
