"""The account key routes: the calling key's record, the organization's keys, self-revocation."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time

from accounts.errors import KeyRequestRefused
from accounts.models import ApiKey
from accounts.services import api_key_create, api_key_revoke
from audit.actors import Actor
from audit.services import PanelContext
from tests.conftest import API, client_for, error_of

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


CURRENT = f"{API}/account/keys/current"
KEYS = f"{API}/account/keys"
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
RECORD_FIELDS = {
    "id",
    "name",
    "description",
    "prefix",
    "status",
    "scopes",
    "unrecognized_scopes",
    "server_restrictions",
    "allowed_ips",
    "expires_at",
    "created_at",
    "created_by",
    "last_used_at",
    "last_used_ip",
    "replaced_by",
    "revoked_at",
}


def revoke(key_id: str) -> None:
    api_key_revoke(key=ApiKey.objects.get(key_id=key_id), actor=TEST_ACTOR)


# GET /account/keys/current


def test_it_returns_the_calling_keys_record_with_exactly_the_contract_fields(make_key):
    body = client_for(make_key()).get(CURRENT).json()
    assert set(body) == RECORD_FIELDS


def test_the_current_record_needs_no_scope(make_key):
    response = client_for(make_key([])).get(CURRENT)
    assert response.status_code == 200


def test_the_current_record_describes_the_key(make_key, acme_server):
    with freeze_time("2026-11-22 10:15:03.120"):
        key = make_key(
            ["servers:read", "sevrers:read"],
            name="ci-deployer",
            description="Deploys from CI",
            server_ids=[acme_server.id],
            allowed_ips=["203.0.113.0/24"],
        )
        body = client_for(key).get(CURRENT, REMOTE_ADDR="203.0.113.9").json()
    assert body == {
        "id": key.key_id,
        "name": "ci-deployer",
        "description": "Deploys from CI",
        "prefix": f"gsk_{key.key_id}",
        "status": "active",
        "scopes": ["servers:read", "sevrers:read"],
        "unrecognized_scopes": ["sevrers:read"],
        "server_restrictions": [acme_server.id],
        "allowed_ips": ["203.0.113.0/24"],
        "expires_at": "2027-02-20T10:15:03.120Z",
        "created_at": "2026-11-22T10:15:03.120Z",
        "created_by": "alice@acme.test",
        "last_used_at": "2026-11-22T10:15:03.120Z",
        "last_used_ip": "203.0.113.9",
        "replaced_by": None,
        "revoked_at": None,
    }


def test_timestamps_are_utc_with_milliseconds_and_z(make_key):
    body = client_for(make_key()).get(CURRENT).json()
    for field in ("expires_at", "created_at", "last_used_at"):
        assert TIMESTAMP.fullmatch(body[field]), (field, body[field])


def test_an_unrestricted_key_has_empty_restriction_lists(make_key):
    body = client_for(make_key()).get(CURRENT).json()
    assert (body["server_restrictions"], body["allowed_ips"]) == ([], [])


def test_the_record_never_contains_the_secret(make_key):
    key = make_key()
    assert key.full_key[13:] not in client_for(key).get(CURRENT).content.decode()


# Expiry on creation


def expiry_of(key_id: str) -> datetime | None:
    return ApiKey.objects.get(key_id=key_id).expires_at


def test_a_key_expires_after_90_days_by_default(make_key):
    with freeze_time("2026-11-22 10:00:00"):
        key = make_key()
    assert expiry_of(key.key_id) == datetime(2027, 2, 20, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize("days", [1, 365])
def test_a_key_may_expire_after_1_to_365_days(make_key, days):
    with freeze_time("2026-11-22 10:00:00"):
        key = make_key(expiry_days=days)
    assert expiry_of(key.key_id) == datetime(2026, 11, 22, 10, 0, tzinfo=UTC) + timedelta(days)


def test_a_key_may_have_no_expiry(make_key):
    key = make_key(expiry_days=None)
    assert client_for(key).get(CURRENT).json()["expires_at"] is None


@pytest.mark.parametrize("days", [0, -1, 366])
def test_it_refuses_an_expiry_outside_1_to_365_days(alice, days):
    with pytest.raises(KeyRequestRefused) as refused:
        api_key_create(
            membership=alice,
            name="bad-expiry",
            expiry_days=days,
            actor=Actor.person(PanelContext(user_email="alice@acme.test")),
        )
    assert refused.value.field == "expiry_days"


def test_it_refuses_a_second_live_key_with_the_same_name(make_key):
    make_key(name="deployer")
    with pytest.raises(KeyRequestRefused) as refused:
        make_key(name="deployer")
    assert refused.value.field == "name"


def test_a_revoked_keys_name_can_be_used_again(make_key):
    old = make_key(name="deployer")
    revoke(old.key_id)
    assert make_key(name="deployer").key_id != old.key_id


def test_an_expired_key_reports_status_expired_in_the_list(make_key):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        expired = make_key(expiry_days=1)
        reader = make_key(["keys:read"], expiry_days=None)
        frozen.tick(2 * 86400)
        body = client_for(reader).get(KEYS).json()
    statuses = {k["id"]: k["status"] for k in body["results"]}
    assert statuses[expired.key_id] == "expired"


# GET /account/keys


def test_listing_keys_needs_keys_read(make_key):
    response = client_for(make_key(["servers:read"])).get(KEYS)
    assert response.status_code == 403
    assert error_of(response)["required_scope"] == "keys:read"


def test_it_lists_the_organizations_keys_newest_first(make_key):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        first = make_key()
        frozen.tick(1)
        second = make_key()
        frozen.tick(1)
        reader = make_key(["keys:read"])
        body = client_for(reader).get(KEYS).json()
    assert [k["id"] for k in body["results"]] == [reader.key_id, second.key_id, first.key_id]
    assert (body["next"], body["previous"]) == (None, None)


def test_the_list_holds_full_key_records(make_key):
    body = client_for(make_key(["keys:read"])).get(KEYS).json()
    [record] = body["results"]
    assert set(record) == RECORD_FIELDS


def test_the_list_leaves_out_revoked_keys(make_key):
    gone = make_key()
    reader = make_key(["keys:read"])
    revoke(gone.key_id)
    ids = [k["id"] for k in client_for(reader).get(KEYS).json()["results"]]
    assert ids == [reader.key_id]


def test_the_list_leaves_out_other_organizations_keys(make_key, charlie):
    make_key(membership=charlie)
    reader = make_key(["keys:read"])
    ids = [k["id"] for k in client_for(reader).get(KEYS).json()["results"]]
    assert ids == [reader.key_id]


# DELETE /account/keys/{keyId}


def test_a_key_can_revoke_itself(make_key):
    key = make_key(["keys:revoke"])
    response = client_for(key).delete(f"{KEYS}/{key.key_id}")
    assert response.status_code == 200
    assert ApiKey.objects.get(key_id=key.key_id).revoked_at is not None


def test_self_revocation_answers_the_revoked_record(make_key):
    with freeze_time("2026-11-22 10:00:00.500"):
        key = make_key(["keys:revoke"])
        body = client_for(key).delete(f"{KEYS}/{key.key_id}").json()
    assert set(body) == RECORD_FIELDS
    assert (body["id"], body["status"]) == (key.key_id, "revoked")
    assert body["revoked_at"] == "2026-11-22T10:00:00.500Z"


def test_the_very_next_call_after_self_revocation_is_token_revoked(make_key):
    key = make_key(["keys:revoke"])
    client = client_for(key)
    client.delete(f"{KEYS}/{key.key_id}")
    response = client.get(CURRENT)
    assert response.status_code == 401
    assert error_of(response)["code"] == "token_revoked"


def test_self_revocation_needs_keys_revoke(make_key):
    key = make_key(["keys:read"])
    response = client_for(key).delete(f"{KEYS}/{key.key_id}")
    assert response.status_code == 403
    error = error_of(response)
    assert (error["code"], error["required_scope"]) == ("insufficient_scope", "keys:revoke")
    assert "rule" not in error
    assert ApiKey.objects.get(key_id=key.key_id).revoked_at is None


def test_a_key_cannot_revoke_another_key_of_its_organization(make_key):
    target = make_key()
    caller = make_key(["keys:revoke"])
    response = client_for(caller).delete(f"{KEYS}/{target.key_id}")
    assert response.status_code == 403
    error = error_of(response)
    assert error["code"] == "insufficient_scope"
    assert (error["required_scope"], error["rule"]) == ("keys:revoke", "self_revocation_only")
    assert ApiKey.objects.get(key_id=target.key_id).revoked_at is None


def test_revoking_a_nonexistent_key_id_gets_the_same_self_revocation_refusal(make_key):
    existing = make_key()
    client = client_for(make_key(["keys:revoke"]))
    for_existing = client.delete(f"{KEYS}/{existing.key_id}")
    for_nonexistent = client.delete(f"{KEYS}/Zz9Zz9Zz")
    assert for_nonexistent.status_code == 403
    assert for_nonexistent.content == for_existing.content


def test_a_key_cannot_revoke_another_organizations_key(make_key, charlie):
    foreign = make_key(membership=charlie)
    response = client_for(make_key(["keys:revoke"])).delete(f"{KEYS}/{foreign.key_id}")
    assert error_of(response)["rule"] == "self_revocation_only"
    assert ApiKey.objects.get(key_id=foreign.key_id).revoked_at is None


def test_a_path_below_a_key_id_is_an_unknown_route_and_revokes_nothing(make_key):
    key = make_key(["keys:revoke"])
    response = client_for(key).delete(f"{KEYS}/{key.key_id}/extra")
    assert response.status_code == 404
    assert ApiKey.objects.get(key_id=key.key_id).revoked_at is None
