"""Every foundation route against every kind of caller: the status and error code each gets.

The path ids always name Acme's objects: the caller's own key id (an Acme key for the Globex
caller) and Acme's first server.
"""

from dataclasses import dataclass

import pytest
from freezegun import freeze_time

from accounts.models import ApiKey
from accounts.services import api_key_revoke
from audit.actors import Actor
from tests.conftest import API, IssuedKey, client_for, error_of

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


EVERY_SCOPE_USED = ["servers:read", "keys:read", "keys:revoke", "audit:read"]

ROUTES = {
    "current": ("get", "/account/keys/current"),
    "list-keys": ("get", "/account/keys"),
    "revoke-own": ("delete", "/account/keys/{key_id}"),
    "audit": ("get", "/account/audit"),
    "list-servers": ("get", "/servers"),
    "get-server": ("get", "/servers/{server_id}"),
}
KINDS = ["own", "foreign-org", "restricted", "unscoped", "expired", "revoked"]

OK = (200, None, {})
EXPIRED = (401, "token_expired", {})
REVOKED = (401, "token_revoked", {})
NOT_FOUND = (404, "server_not_found", {})


def lacks(scope: str) -> tuple[int, str, dict[str, str]]:
    return 403, "insufficient_scope", {"required_scope": scope}


EXPECTED = {
    "current": {
        "own": OK,
        "foreign-org": OK,
        "restricted": OK,
        "unscoped": OK,
        "expired": EXPIRED,
        "revoked": REVOKED,
    },
    "list-keys": {
        "own": OK,
        "foreign-org": OK,
        "restricted": OK,
        "unscoped": lacks("keys:read"),
        "expired": EXPIRED,
        "revoked": REVOKED,
    },
    "revoke-own": {
        "own": OK,
        "foreign-org": (
            403,
            "insufficient_scope",
            {"required_scope": "keys:revoke", "rule": "self_revocation_only"},
        ),
        "restricted": OK,
        "unscoped": lacks("keys:revoke"),
        "expired": EXPIRED,
        "revoked": REVOKED,
    },
    "audit": {
        "own": OK,
        "foreign-org": OK,
        "restricted": OK,
        "unscoped": lacks("audit:read"),
        "expired": EXPIRED,
        "revoked": REVOKED,
    },
    "list-servers": {
        "own": OK,
        "foreign-org": OK,
        "restricted": OK,
        "unscoped": lacks("servers:read"),
        "expired": EXPIRED,
        "revoked": REVOKED,
    },
    "get-server": {
        "own": OK,
        "foreign-org": NOT_FOUND,
        "restricted": NOT_FOUND,
        "unscoped": lacks("servers:read"),
        "expired": EXPIRED,
        "revoked": REVOKED,
    },
}


@dataclass
class Scenario:
    kind: str
    caller: IssuedKey
    key_id: str
    server_id: str


@pytest.fixture
def scenario(request, make_key, charlie, acme_server, acme_other_server, globex_server):
    kind = request.param
    with freeze_time("2026-11-22 10:00:00") as frozen:
        if kind == "foreign-org":
            caller = make_key(EVERY_SCOPE_USED, membership=charlie)
            yield Scenario(kind, caller, make_key().key_id, acme_server.id)
            return
        options = {
            "own": {},
            "restricted": {"server_ids": [acme_other_server.id]},
            "unscoped": {},
            "expired": {"expiry_days": 1},
            "revoked": {},
        }[kind]
        caller = make_key([] if kind == "unscoped" else EVERY_SCOPE_USED, **options)
        if kind == "expired":
            frozen.tick(86400)
        if kind == "revoked":
            api_key_revoke(key=ApiKey.objects.get(key_id=caller.key_id), actor=TEST_ACTOR)
        yield Scenario(kind, caller, caller.key_id, acme_server.id)


@pytest.mark.parametrize("scenario", KINDS, indirect=True)
@pytest.mark.parametrize("route", ROUTES)
def test_each_caller_gets_the_contracted_answer_on_each_route(scenario, route):
    method, template = ROUTES[route]
    path = template.format(key_id=scenario.key_id, server_id=scenario.server_id)
    response = getattr(client_for(scenario.caller), method)(f"{API}{path}")
    status, code, extras = EXPECTED[route][scenario.kind]
    assert response.status_code == status, response.content
    if code is None:
        return
    error = error_of(response)
    assert error["code"] == code
    assert {name: error[name] for name in extras} == extras
    assert set(error) == {"code", "message", *extras}


def test_the_matrix_covers_every_route_and_kind():
    assert {(r, k) for r in EXPECTED for k in EXPECTED[r]} == {
        (r, k) for r in ROUTES for k in KINDS
    }
