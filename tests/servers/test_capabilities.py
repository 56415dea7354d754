"""GET /servers/{id}/capabilities, and the 501 / 403 answers it explains, enforced on the routes."""

import pytest

from servers.game.capabilities import Capability
from servers.models import Server
from tests.conftest import API, client_for, error_of

NAMES = {
    "players", "console", "power", "backups", "restore", "maintenance", "metrics",
    "settings", "schedules", "migration", "config_events",
}  # fmt: skip


def capabilities(key, server):
    response = client_for(key).get(f"{API}/servers/{server.id}/capabilities")
    assert response.status_code == 200, response.content
    return response.json()


def disable(server, *names):
    Server.objects.filter(id=server.id).update(disabled_capabilities=list(names))


def test_it_lists_every_capability_with_its_four_answers(make_key, acme_server):
    body = capabilities(make_key(["servers:read"]), acme_server)
    assert body["server_id"] == acme_server.id
    assert set(body["capabilities"]) == NAMES
    for entry in body["capabilities"].values():
        assert set(entry) == {"supported", "enabled", "required_scope", "granted"}


def test_minecraft_supports_everything(make_key, acme_server):
    body = capabilities(make_key(["servers:read"]), acme_server)
    assert all(entry["supported"] for entry in body["capabilities"].values())


def test_a_custom_game_does_not_support_players(make_key, acme_other_server):
    body = capabilities(make_key(["servers:read"]), acme_other_server)
    unsupported = {n for n, e in body["capabilities"].items() if not e["supported"]}
    assert unsupported == {"players"}


def test_players_on_a_custom_game_is_501_not_supported(make_key, acme_other_server):
    response = client_for(make_key(["servers:read"])).get(
        f"{API}/servers/{acme_other_server.id}/players"
    )
    assert response.status_code == 501
    error = error_of(response)
    assert (error["code"], error["capability"]) == ("not_supported", "players")


def test_a_disabled_capability_shows_as_not_enabled(make_key, acme_server):
    disable(acme_server, "backups")
    body = capabilities(make_key(["servers:read"]), acme_server)
    assert body["capabilities"]["backups"]["enabled"] is False
    assert body["capabilities"]["power"]["enabled"] is True


def test_a_disabled_capability_is_403_feature_not_enabled(make_key, acme_server):
    disable(acme_server, "backups")
    response = client_for(make_key(["backups:create"])).post(
        f"{API}/servers/{acme_server.id}/backups", {}, format="json"
    )
    assert response.status_code == 403
    error = error_of(response)
    assert (error["code"], error["capability"]) == ("feature_not_enabled", "backups")


def test_granted_says_whether_the_key_holds_the_required_scope(make_key, acme_server):
    body = capabilities(make_key(["servers:read", "servers:power"]), acme_server)
    assert body["capabilities"]["power"] == {
        "supported": True,
        "enabled": True,
        "required_scope": "servers:power",
        "granted": True,
    }
    assert body["capabilities"]["console"]["granted"] is False
    assert body["capabilities"]["console"]["required_scope"] == "console:write"


def test_a_capability_not_granted_is_403_insufficient_scope(make_key, acme_server):
    key = make_key(["servers:read"])
    assert capabilities(key, acme_server)["capabilities"]["power"]["granted"] is False
    response = client_for(key).post(
        f"{API}/servers/{acme_server.id}/power", {"action": "start"}, format="json"
    )
    assert (response.status_code, error_of(response)["code"]) == (403, "insufficient_scope")


def test_capabilities_needs_servers_read(make_key, acme_server):
    response = client_for(make_key(["servers:power"])).get(
        f"{API}/servers/{acme_server.id}/capabilities"
    )
    assert response.status_code == 403
    assert error_of(response)["required_scope"] == "servers:read"


# Order of checks: scope -> server -> capability -> body -> state.


def test_scope_is_checked_before_the_server(make_key, globex_server):
    response = client_for(make_key(["servers:read"])).post(
        f"{API}/servers/{globex_server.id}/power", {"action": "start"}, format="json"
    )
    assert error_of(response)["code"] == "insufficient_scope"


def test_the_server_is_checked_before_the_capability(make_key, acme_other_server, acme_server):
    key = make_key(["servers:read"], server_ids=[acme_server.id])
    response = client_for(key).get(f"{API}/servers/{acme_other_server.id}/players")
    assert (response.status_code, error_of(response)["code"]) == (404, "server_not_found")


def test_not_supported_comes_before_not_enabled(make_key, acme_other_server):
    disable(acme_other_server, "players")
    response = client_for(make_key(["servers:read"])).get(
        f"{API}/servers/{acme_other_server.id}/players"
    )
    assert response.status_code == 501


def test_the_capability_is_checked_before_the_body(make_key, acme_server):
    disable(acme_server, "power")
    response = client_for(make_key(["servers:power"])).post(
        f"{API}/servers/{acme_server.id}/power", {"action": "explode"}, format="json"
    )
    assert error_of(response)["code"] == "feature_not_enabled"


def test_the_body_is_checked_before_the_state(make_key, acme_server):
    response = client_for(make_key(["servers:power"])).post(
        f"{API}/servers/{acme_server.id}/power", {"action": "explode"}, format="json"
    )
    assert error_of(response)["code"] == "invalid_request"


@pytest.mark.parametrize(
    ("method", "path", "scope", "capability"),
    [
        ("post", "power", "servers:power", Capability.POWER),
        ("post", "console", "console:write", Capability.CONSOLE),
        ("get", "players", "servers:read", Capability.PLAYERS),
        ("get", "realtime-stats", "servers:read", Capability.METRICS),
        ("get", "metrics", "servers:read", Capability.METRICS),
        ("get", "settings/history", "servers:read", Capability.SETTINGS),
        ("get", "settings/drift", "servers:read", Capability.SETTINGS),
        ("get", "schedules", "schedules:read", Capability.SCHEDULES),
        ("get", "backups", "backups:read", Capability.BACKUPS),
        ("post", "maintenance", "maintenance:execute", Capability.MAINTENANCE),
        ("get", "migration-status", "servers:read", Capability.MIGRATION),
        ("get", "config-events/status", "servers:read", Capability.CONFIG_EVENTS),
    ],
)
def test_every_gated_route_answers_403_when_its_capability_is_off(
    make_key, acme_server, method, path, scope, capability
):
    disable(acme_server, capability.value)
    client = client_for(make_key([scope]))
    response = getattr(client, method)(f"{API}/servers/{acme_server.id}/{path}", {}, format="json")
    assert response.status_code == 403, response.content
    assert error_of(response)["capability"] == capability.value
