"""Bearer key authentication: token shape, key state, IP allowlist, scopes, order of checks,
coalesced last use and the per-process key cache."""

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from freezegun import freeze_time

from accounts import keys
from accounts.errors import ScopeExceedsPermissions
from accounts.models import ApiKey
from accounts.services import api_key_create, api_key_revoke
from audit.actors import Actor
from audit.models import AuditRecord
from audit.services import PanelContext
from tests.conftest import API, client_for, error_of

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


CURRENT = f"{API}/account/keys/current"


def well_formed_token(key_id: str, secret_body: str = "W" * 37) -> str:
    """A token that passes the offline checksum but carries a secret we never issued."""
    body = f"gsk_{key_id}_{secret_body}"
    return body + keys.checksum(body)


def with_char_replaced(text: str, index: int) -> str:
    replacement = "a" if text[index] != "a" else "b"
    return text[:index] + replacement + text[index + 1 :]


def api_rows() -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(source="api"))


# Token


def test_it_accepts_a_valid_key(make_key):
    response = client_for(make_key()).get(CURRENT)
    assert response.status_code == 200


@pytest.mark.parametrize("position", [5, 11, 20, 49, 52, 55], ids=lambda p: f"char{p}")
def test_a_one_character_typo_is_invalid_token_without_a_database_query(
    make_key, django_assert_num_queries, position
):
    typo = with_char_replaced(make_key().full_key, position)
    client = client_for(typo)
    with django_assert_num_queries(0):
        response = client.get(CURRENT)
    assert response.status_code == 401
    assert error_of(response)["code"] == "invalid_token"


FOREIGN_TOKENS = {
    "stripe-like": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc" * 2,
    "random-56": "Xq0b9LmZ4kT7pW2sN8vR1cY6hJ3dF5gA0eK9uI2oP7yT4rE1wQ8zMnB3",
    "short-secret": "gsk_Ab3dE6gH_" + "a" * 42,
    "long-secret": "gsk_Ab3dE6gH_" + "a" * 44,
    "upper-prefix": "GSK_Ab3dE6gH_" + "a" * 43,
    "symbols": "gsk_Ab3dE6gH_" + "a-" * 21 + "a",
    "jwt-like": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
}


@pytest.mark.parametrize("token", FOREIGN_TOKENS.values(), ids=FOREIGN_TOKENS.keys())
def test_a_foreign_string_is_invalid_token_without_a_database_query(
    make_key, django_assert_num_queries, token
):
    make_key()  # the organization has keys; none of them is named
    client = client_for(token)
    with django_assert_num_queries(0):
        response = client.get(CURRENT)
    assert response.status_code == 401
    assert error_of(response)["code"] == "invalid_token"


@pytest.mark.parametrize("token", FOREIGN_TOKENS.values(), ids=FOREIGN_TOKENS.keys())
def test_a_foreign_string_is_not_audited(make_key, token):
    make_key()
    client_for(token).get(CURRENT)
    assert api_rows() == []


def test_a_bad_checksum_for_a_known_key_id_is_not_audited(make_key):
    key = make_key()
    client_for(with_char_replaced(key.full_key, 55)).get(CURRENT)
    assert api_rows() == []


def test_a_well_formed_token_with_an_unknown_key_id_is_invalid_token_and_not_audited(make_key):
    make_key()
    response = client_for(well_formed_token("Zz9Zz9Zz")).get(CURRENT)
    assert response.status_code == 401
    assert error_of(response)["code"] == "invalid_token"
    assert api_rows() == []


def test_a_wrong_secret_for_a_known_key_id_is_invalid_token(make_key):
    key = make_key()
    response = client_for(well_formed_token(key.key_id)).get(CURRENT)
    assert response.status_code == 401
    assert error_of(response)["code"] == "invalid_token"


def test_a_wrong_secret_for_a_known_key_id_is_audited_against_that_key(make_key):
    key = make_key()
    client_for(well_formed_token(key.key_id)).get(CURRENT)
    [row] = api_rows()
    assert (row.actor_key_id, row.organization_id) == (key.key_id, key.organization_id)
    assert (row.status_code, row.error_code) == (401, "invalid_token")


# Key state


def test_it_refuses_a_key_past_its_expiry_with_token_expired(make_key):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        key = make_key(expiry_days=1)
        frozen.tick(86400)
        response = client_for(key).get(CURRENT)
    assert response.status_code == 401
    assert error_of(response)["code"] == "token_expired"


def test_it_accepts_a_key_one_second_before_its_expiry(make_key):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        key = make_key(expiry_days=1)
        frozen.tick(86399)
        response = client_for(key).get(CURRENT)
    assert response.status_code == 200


def test_a_key_without_expiry_keeps_working(make_key):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        key = make_key(expiry_days=None)
        frozen.move_to("2036-11-22 10:00:00")
        response = client_for(key).get(CURRENT)
    assert response.status_code == 200


def test_it_refuses_a_revoked_key_with_token_revoked(make_key):
    key = make_key()
    api_key_revoke(key=ApiKey.objects.get(key_id=key.key_id), actor=TEST_ACTOR)
    response = client_for(key).get(CURRENT)
    assert response.status_code == 401
    assert error_of(response)["code"] == "token_revoked"


def test_a_wrong_secret_for_a_revoked_key_is_invalid_token(make_key):
    key = make_key()
    api_key_revoke(key=ApiKey.objects.get(key_id=key.key_id), actor=TEST_ACTOR)
    response = client_for(well_formed_token(key.key_id)).get(CURRENT)
    assert error_of(response)["code"] == "invalid_token"


def test_a_wrong_secret_for_an_expired_key_is_invalid_token(make_key):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        key = make_key(expiry_days=1)
        frozen.tick(2 * 86400)
        response = client_for(well_formed_token(key.key_id)).get(CURRENT)
    assert error_of(response)["code"] == "invalid_token"


def test_a_panel_revocation_is_refused_at_once_in_the_revoking_process(make_key):
    key = make_key()
    client = client_for(key)
    assert client.get(CURRENT).status_code == 200  # the key's record is now cached here
    api_key_revoke(
        key=ApiKey.objects.get(key_id=key.key_id),
        actor=Actor.person(PanelContext(user_email="a@acme.test")),
    )
    assert error_of(client.get(CURRENT))["code"] == "token_revoked"


def test_a_revocation_made_by_another_process_is_honoured_within_60_seconds(make_key):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        key = make_key()
        client = client_for(key)
        assert client.get(CURRENT).status_code == 200  # cached in this process
        ApiKey.objects.filter(key_id=key.key_id).update(revoked_at=timezone.now())
        frozen.tick(60)
        response = client.get(CURRENT)
    assert response.status_code == 401
    assert error_of(response)["code"] == "token_revoked"


def test_a_longer_configured_key_cache_is_still_capped_at_60_seconds(make_key, settings):
    settings.API_KEY_CACHE_SECONDS = 3600
    with freeze_time("2026-11-22 10:00:00") as frozen:
        key = make_key()
        client = client_for(key)
        assert client.get(CURRENT).status_code == 200
        ApiKey.objects.filter(key_id=key.key_id).update(revoked_at=timezone.now())
        frozen.tick(60)
        response = client.get(CURRENT)
    assert error_of(response)["code"] == "token_revoked"


def test_an_expiry_shortened_by_another_process_is_honoured_within_60_seconds(make_key):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        key = make_key()
        client = client_for(key)
        assert client.get(CURRENT).status_code == 200
        ApiKey.objects.filter(key_id=key.key_id).update(expires_at=timezone.now())
        frozen.tick(60)
        response = client.get(CURRENT)
    assert error_of(response)["code"] == "token_expired"


# IP allowlist


def test_a_key_restricted_to_a_network_is_refused_from_outside_it(make_key):
    key = make_key(allowed_ips=["10.0.0.0/8"])
    response = client_for(key).get(CURRENT, REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 403
    assert error_of(response)["code"] == "ip_not_allowed"


def test_a_key_restricted_to_a_network_works_from_inside_it(make_key):
    key = make_key(allowed_ips=["10.0.0.0/8"])
    response = client_for(key).get(CURRENT, REMOTE_ADDR="10.1.2.3")
    assert response.status_code == 200


def test_a_key_restricted_to_one_address_works_from_that_address(make_key):
    key = make_key(allowed_ips=["203.0.113.9"])
    assert client_for(key).get(CURRENT, REMOTE_ADDR="203.0.113.9").status_code == 200
    assert client_for(key).get(CURRENT, REMOTE_ADDR="203.0.113.10").status_code == 403


# Scopes


def test_a_key_lacking_the_scope_gets_insufficient_scope_naming_it(make_key):
    response = client_for(make_key(["keys:read"])).get(f"{API}/servers")
    assert response.status_code == 403
    assert error_of(response) == {
        "code": "insufficient_scope",
        "message": error_of(response)["message"],
        "required_scope": "servers:read",
    }


def test_an_unrecognized_scope_grants_nothing(make_key):
    response = client_for(make_key(["sevrers:read"])).get(f"{API}/servers")
    assert response.status_code == 403
    assert error_of(response)["required_scope"] == "servers:read"


def test_an_unrecognized_scope_is_listed_in_unrecognized_scopes(make_key):
    body = client_for(make_key(["servers:read", "sevrers:read"])).get(CURRENT).json()
    assert body["scopes"] == ["servers:read", "sevrers:read"]
    assert body["unrecognized_scopes"] == ["sevrers:read"]


def test_a_creator_cannot_grant_a_scope_they_do_not_hold(bob):
    with pytest.raises(ScopeExceedsPermissions) as refused:
        api_key_create(
            membership=bob,
            name="too-much",
            scopes=["servers:read", "keys:revoke"],
            actor=Actor.person(PanelContext(user_email="bob@acme.test")),
        )
    assert refused.value.code == "scope_exceeds_permissions"
    assert refused.value.scopes == ["keys:revoke"]
    assert not ApiKey.objects.filter(name="too-much").exists()


def test_an_unrecognized_scope_does_not_count_against_the_creator(bob):
    new = api_key_create(
        membership=bob,
        name="typo",
        scopes=["servers:read", "keys:revok"],
        actor=Actor.person(PanelContext(user_email="bob@acme.test")),
    )
    assert new.key.scopes == ["servers:read", "keys:revok"]


def test_a_member_can_grant_the_scopes_they_hold(bob, make_key):
    key = make_key(["servers:read", "keys:read"], membership=bob)
    body = client_for(key).get(f"{API}/account/keys").json()
    assert [k["created_by"] for k in body["results"]] == ["bob@acme.test"]


# Order of checks: token -> key state -> IP allowlist -> rate limit -> scope -> server


def test_an_expired_key_without_the_scope_gets_401_not_403(make_key):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        key = make_key([], expiry_days=1)
        frozen.tick(2 * 86400)
        response = client_for(key).get(f"{API}/account/keys")
    assert (response.status_code, error_of(response)["code"]) == (401, "token_expired")


def test_a_revoked_key_called_from_outside_its_allowlist_gets_token_revoked(make_key):
    key = make_key(allowed_ips=["10.0.0.0/8"])
    api_key_revoke(key=ApiKey.objects.get(key_id=key.key_id), actor=TEST_ACTOR)
    response = client_for(key).get(CURRENT, REMOTE_ADDR="127.0.0.1")
    assert (response.status_code, error_of(response)["code"]) == (401, "token_revoked")


def test_a_key_outside_its_allowlist_without_the_scope_gets_ip_not_allowed(make_key):
    key = make_key([], allowed_ips=["10.0.0.0/8"])
    response = client_for(key).get(f"{API}/account/keys", REMOTE_ADDR="127.0.0.1")
    assert (response.status_code, error_of(response)["code"]) == (403, "ip_not_allowed")


def test_calls_refused_by_the_allowlist_do_not_use_up_the_rate_limit(make_key, settings):
    settings.API_RATE_DEFAULT = "2/min"
    key = make_key(allowed_ips=["10.0.0.0/8"])
    client = client_for(key)
    with freeze_time("2026-11-22 10:00:05"):
        codes = [client.get(CURRENT, REMOTE_ADDR="127.0.0.1").status_code for _ in range(3)]
        allowed = client.get(CURRENT, REMOTE_ADDR="10.0.0.1")
    assert codes == [403, 403, 403]
    assert allowed.status_code == 200


def test_a_rate_limited_key_without_the_scope_gets_429_not_403(make_key, settings):
    settings.API_RATE_DEFAULT = "2/min"
    client = client_for(make_key([]))
    with freeze_time("2026-11-22 10:00:05"):
        codes = [client.get(f"{API}/account/keys").status_code for _ in range(3)]
    assert codes == [403, 403, 429]


def test_a_restricted_server_without_servers_read_gets_403_before_404(make_key, acme_server):
    key = make_key(["keys:read"], server_ids=[acme_server.id])
    client = client_for(key)
    outside = client.get(f"{API}/servers/srv_doesnotexist00000000")
    inside = client.get(f"{API}/servers/{acme_server.id}")
    assert (outside.status_code, error_of(outside)["code"]) == (403, "insufficient_scope")
    assert (inside.status_code, error_of(inside)["code"]) == (403, "insufficient_scope")


# Last use, coalesced


def last_use_in_db(key_id: str) -> tuple[datetime | None, str | None]:
    row = ApiKey.objects.get(key_id=key_id)
    return row.last_used_at, row.last_used_ip


def key_updates(queries: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith("UPDATE") and "accounts_apikey" in q["sql"]
    ]


def test_the_first_call_records_last_use(make_key):
    with freeze_time("2026-11-22 10:00:00"):
        key = make_key()
        client_for(key).get(CURRENT, REMOTE_ADDR="203.0.113.9")
    assert last_use_in_db(key.key_id) == (datetime(2026, 11, 22, 10, 0, tzinfo=UTC), "203.0.113.9")


def test_calls_within_a_minute_from_the_same_address_write_nothing(make_key):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        key = make_key()
        client = client_for(key)
        client.get(CURRENT)
        frozen.tick(59)
        with CaptureQueriesContext(connection) as queries:
            client.get(CURRENT)
    assert key_updates(queries) == []
    assert last_use_in_db(key.key_id)[0] == datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def test_a_call_a_minute_later_records_last_use_again(make_key):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        key = make_key()
        client = client_for(key)
        client.get(CURRENT)
        frozen.tick(30)
        client.get(CURRENT)
        frozen.tick(31)
        client.get(CURRENT)
    assert last_use_in_db(key.key_id)[0] == datetime(2026, 11, 22, 10, 1, 1, tzinfo=UTC)


def test_a_new_address_is_recorded_at_once(make_key):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        key = make_key()
        client = client_for(key)
        client.get(CURRENT, REMOTE_ADDR="127.0.0.1")
        frozen.tick(5)
        client.get(CURRENT, REMOTE_ADDR="198.51.100.7")
    assert last_use_in_db(key.key_id) == (
        datetime(2026, 11, 22, 10, 0, 5, tzinfo=UTC),
        "198.51.100.7",
    )


def test_the_keys_own_record_shows_its_last_use(make_key):
    with freeze_time("2026-11-22 10:00:00.250"):
        key = make_key()
        body = client_for(key).get(CURRENT, REMOTE_ADDR="198.51.100.7").json()
    assert (body["last_used_at"], body["last_used_ip"]) == (
        "2026-11-22T10:00:00.250Z",
        "198.51.100.7",
    )
