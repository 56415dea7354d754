"""A key's secret exists in two places only: the holder's hands and the one-time creation result.

Everything a key goes through (creation, use, failed calls, rotation, revocation) is run with
every logger at DEBUG and every SQL statement logged; then the logs, the audit rows, the key
table and every API response are searched for the keys and their secrets.
"""

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connection
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext

from accounts import keys
from accounts.models import ApiKey, Membership
from accounts.services import api_key_create, api_key_revoke, api_key_rotate
from audit.actors import Actor
from audit.models import AuditRecord
from audit.services import PanelContext
from tests.conftest import API, client_for

PANEL = PanelContext(user_email="alice@acme.test", path="/panel/keys/", ip="127.0.0.1")


def well_formed_token(key_id: str, filler: str) -> str:
    body = f"gsk_{key_id}_{filler * 37}"
    return body + keys.checksum(body)


def secret_parts(full_key: str) -> list[str]:
    """The whole key, its secret, and the secret's opening characters (a truncated leak)."""
    secret = full_key[13:]
    return [full_key, secret, secret[:37], secret[:12]]


@dataclass
class Trail:
    tokens: list[str] = field(default_factory=list)
    responses: list[Any] = field(default_factory=list)

    def call(self, token: str, method: str, path: str, **extra: Any) -> Any:
        response = getattr(client_for(token), method)(f"{API}{path}", **extra)
        self.responses.append(response)
        return response


def live_a_keys_life(make_key) -> Trail:
    trail = Trail()
    key = make_key(["keys:read", "keys:revoke", "audit:read", "servers:read"], name="life")
    trail.tokens.append(key.full_key)
    for path in ("/account/keys/current", "/account/keys", "/account/audit", "/servers"):
        trail.call(key.full_key, "get", path)
    trail.call(key.full_key, "get", "/servers/srv_doesNotExist00000000")
    trail.call(key.full_key, "get", "/no/such/route")
    trail.call(key.full_key, "post", "/account/keys")

    wrong = [well_formed_token(key.key_id, f) for f in "WXY"]
    typo = key.full_key[:-1] + ("a" if key.full_key[-1] != "a" else "b")
    trail.tokens += [*wrong, typo]
    for token in [*wrong, typo]:
        trail.call(token, "get", "/account/keys/current", HTTP_USER_AGENT="probe/1")

    successor = api_key_rotate(
        key=ApiKey.objects.get(key_id=key.key_id),
        membership=Membership.objects.get(user__email=PANEL.user_email),
        actor=Actor.person(PANEL),
    )
    trail.tokens.append(successor.full_key)
    trail.call(key.full_key, "get", "/account/keys/current")  # in grace
    trail.call(successor.full_key, "get", "/account/keys")
    trail.call(successor.full_key, "delete", f"/account/keys/{successor.key.key_id}")
    trail.call(successor.full_key, "get", "/account/keys/current")  # revoked
    api_key_revoke(key=ApiKey.objects.get(key_id=key.key_id), actor=Actor.person(PANEL))
    trail.call(key.full_key, "get", "/account/keys/current")  # revoked
    trail.call(well_formed_token(key.key_id, "Z"), "get", "/account/keys/current")
    trail.tokens.append(well_formed_token(key.key_id, "Z"))
    return trail


@pytest.fixture
def trail(make_key, caplog) -> Trail:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django.db.backends")
    with CaptureQueriesContext(connection):  # forces the debug cursor: all SQL is logged
        trail = live_a_keys_life(make_key)
    assert any(r.name == "django.db.backends" for r in caplog.records)  # SQL really was logged
    assert {r.status_code for r in trail.responses} == {200, 401, 404, 405}
    return trail


def leaked(haystack: str, trail: Trail) -> list[str]:
    return [part for token in trail.tokens for part in secret_parts(token) if part in haystack]


def test_no_log_record_contains_a_key_or_secret(trail, caplog):
    logged = "\n".join(
        f"{r.getMessage()}\n{r.exc_text or ''}\n{r.__dict__!r}" for r in caplog.records
    )
    assert leaked(logged, trail) == []


def test_no_audit_row_contains_a_key_or_secret(trail):
    rows = [model_to_dict(r) for r in AuditRecord.objects.all()]
    assert len(rows) > 10
    assert leaked(json.dumps(rows, default=str), trail) == []


def test_the_key_table_holds_no_key_or_secret(trail):
    rows = list(ApiKey.objects.values())
    assert leaked(json.dumps(rows, default=str), trail) == []


def test_no_api_response_contains_a_key_or_secret(trail):
    shown = "\n".join(f"{r.content.decode()}\n{dict(r.items())!r}" for r in trail.responses)
    assert leaked(shown, trail) == []


def test_the_creation_result_does_not_print_the_key(alice):
    new = api_key_create(membership=alice, name="printed", actor=Actor.person(PANEL))
    assert new.full_key not in repr(new)
    assert new.full_key[13:] not in str(new)


def test_a_parsed_key_does_not_print_its_secret(make_key):
    key = make_key()
    parsed = keys.parse_key(key.full_key)
    assert parsed is not None
    assert key.full_key[13:] not in repr(parsed)
