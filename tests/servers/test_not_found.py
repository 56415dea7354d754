"""Every server route answers a foreign, a restricted and a nonexistent server alike: 404
server_not_found, byte for byte, for a key that holds the route's scope."""

import pytest

from tests.conftest import client_for, error_of
from tests.servers.routes import ALL_SCOPES, SERVER_ROUTES

ABSENT = "srv_doesNotExist00000000"


@pytest.mark.parametrize("route", SERVER_ROUTES, ids=str)
def test_it_hides_foreign_restricted_and_absent_servers_alike(
    make_key, acme_server, acme_other_server, globex_server, route
):
    client = client_for(make_key(ALL_SCOPES, server_ids=[acme_server.id]))
    answers = [route.call(client, sid) for sid in (globex_server.id, acme_other_server.id, ABSENT)]
    assert [a.status_code for a in answers] == [404, 404, 404]
    assert error_of(answers[0])["code"] == "server_not_found"
    assert answers[0].content == answers[1].content == answers[2].content


@pytest.mark.parametrize("route", SERVER_ROUTES, ids=str)
def test_an_unrestricted_key_cannot_see_another_organizations_server(
    make_key, globex_server, route
):
    response = route.call(client_for(make_key(ALL_SCOPES)), globex_server.id)
    assert (response.status_code, error_of(response)["code"]) == (404, "server_not_found")


@pytest.mark.parametrize("route", SERVER_ROUTES, ids=str)
def test_each_route_needs_its_scope(make_key, acme_server, route):
    others = [scope for scope in ALL_SCOPES if scope != route.scope]
    response = route.call(client_for(make_key(others)), acme_server.id)
    assert response.status_code == 403
    assert error_of(response)["required_scope"] == route.scope
