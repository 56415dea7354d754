"""Rotation (panel): a successor with a new id and secret; the old key works through its grace
period, announcing its end with Deprecation and Sunset, then answers token_expired."""

from datetime import UTC, datetime

import pytest
from freezegun import freeze_time

from accounts import keys
from accounts.errors import KeyNotRotatable, KeyRequestRefused
from accounts.models import ApiKey, Membership
from accounts.services import NewKey, api_key_revoke, api_key_rotate
from audit.actors import Actor
from audit.models import AuditRecord
from audit.services import PanelContext
from tests.conftest import API, client_for, error_of

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


CURRENT = f"{API}/account/keys/current"
ROTATED_AT = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
ROTATED_AT_UNIX = int(ROTATED_AT.timestamp())
PANEL = PanelContext(user_email="alice@acme.test")


def rotate(key_id: str, **options: int) -> NewKey:
    key = ApiKey.objects.get(key_id=key_id)
    alice = Membership.objects.get(user__email=PANEL.user_email, organization=key.organization)
    return api_key_rotate(key=key, membership=alice, actor=Actor.person(PANEL), **options)


@pytest.fixture
def frozen():
    with freeze_time("2026-11-22 10:00:00") as frozen_time:
        yield frozen_time


def test_it_mints_a_successor_with_a_new_id_and_secret(make_key, frozen):
    old = make_key()
    new = rotate(old.key_id)
    assert new.key.key_id != old.key_id
    assert new.full_key[13:] != old.full_key[13:]
    assert client_for(new.full_key).get(CURRENT).json()["id"] == new.key.key_id


def test_the_successor_carries_every_property_of_the_old_key(make_key, acme_server, frozen):
    old = make_key(
        ["servers:read", "sevrers:read"],
        name="deployer",
        description="CI",
        expiry_days=30,
        server_ids=[acme_server.id],
        allowed_ips=["127.0.0.0/8"],
    )
    frozen.tick(3600)
    new = rotate(old.key_id)
    old_record = client_for(old).get(CURRENT).json()
    new_record = client_for(new.full_key).get(CURRENT).json()
    carried = [
        "name",
        "description",
        "scopes",
        "unrecognized_scopes",
        "server_restrictions",
        "allowed_ips",
    ]
    assert {f: new_record[f] for f in carried} == {f: old_record[f] for f in carried}
    assert new_record["expires_at"] == "2026-12-22T10:00:00.000Z"  # the original expiry date


def test_the_old_key_points_to_its_successor(make_key, frozen):
    old = make_key()
    new = rotate(old.key_id)
    assert client_for(old).get(CURRENT).json()["replaced_by"] == new.key.key_id


def test_the_old_key_keeps_working_through_the_default_24_hour_grace(make_key, frozen):
    old = make_key()
    rotate(old.key_id)
    frozen.tick(24 * 3600 - 1)
    assert client_for(old).get(CURRENT).status_code == 200


def test_the_old_key_is_token_expired_after_the_grace_period(make_key, frozen):
    old = make_key()
    rotate(old.key_id, grace_hours=2)
    frozen.tick(2 * 3600)
    response = client_for(old).get(CURRENT)
    assert response.status_code == 401
    assert error_of(response)["code"] == "token_expired"


def test_a_grace_of_zero_expires_the_old_key_at_once(make_key, frozen):
    old = make_key()
    rotate(old.key_id, grace_hours=0)
    response = client_for(old).get(CURRENT)
    assert error_of(response)["code"] == "token_expired"


def test_the_old_key_in_grace_announces_deprecation_and_sunset(make_key, frozen):
    old = make_key()
    rotate(old.key_id)
    response = client_for(old).get(CURRENT)
    assert response["Deprecation"] == f"@{ROTATED_AT_UNIX}"
    assert response["Sunset"] == "Mon, 23 Nov 2026 10:00:00 GMT"


def test_the_sunset_is_the_original_expiry_when_that_comes_before_the_grace_end(make_key, frozen):
    old = make_key(expiry_days=1)
    frozen.tick(23 * 3600)
    rotate(old.key_id, grace_hours=168)
    response = client_for(old).get(CURRENT)
    assert response["Deprecation"] == f"@{ROTATED_AT_UNIX + 23 * 3600}"
    assert response["Sunset"] == "Mon, 23 Nov 2026 10:00:00 GMT"


def test_error_responses_to_the_old_key_announce_deprecation_too(make_key, frozen):
    old = make_key([])
    rotate(old.key_id)
    response = client_for(old).get(f"{API}/servers")
    assert response.status_code == 403
    assert response["Deprecation"] == f"@{ROTATED_AT_UNIX}"
    assert "Sunset" in response


def test_a_rate_limited_answer_to_the_old_key_announces_deprecation(make_key, frozen, settings):
    settings.API_RATE_DEFAULT = "1/min"
    old = make_key()
    rotate(old.key_id)
    client = client_for(old)
    client.get(CURRENT)
    response = client.get(CURRENT)
    assert response.status_code == 429
    assert response["Deprecation"] == f"@{ROTATED_AT_UNIX}"


def test_an_allowlist_refusal_to_the_old_key_announces_deprecation(make_key, frozen):
    old = make_key(allowed_ips=["10.0.0.0/8"])
    rotate(old.key_id)
    response = client_for(old).get(CURRENT, REMOTE_ADDR="192.0.2.1")
    assert response.status_code == 403
    assert response["Deprecation"] == f"@{ROTATED_AT_UNIX}"


def test_a_wrong_secret_for_the_old_key_learns_nothing_of_its_rotation(make_key, frozen):
    old = make_key()
    rotate(old.key_id)
    body = f"gsk_{old.key_id}_{'W' * 37}"
    response = client_for(body + keys.checksum(body)).get(CURRENT)
    assert response.status_code == 401
    assert "Deprecation" not in response
    assert "Sunset" not in response


def test_the_successor_carries_no_deprecation(make_key, frozen):
    old = make_key()
    new = rotate(old.key_id)
    response = client_for(new.full_key).get(CURRENT)
    assert "Deprecation" not in response
    assert "Sunset" not in response


def test_a_key_that_was_never_rotated_carries_no_deprecation(make_key):
    response = client_for(make_key()).get(CURRENT)
    assert "Deprecation" not in response
    assert "Sunset" not in response


def test_old_and_new_key_share_the_name_during_grace(make_key, frozen):
    old = make_key(["keys:read"], name="deployer")
    new = rotate(old.key_id)
    listed = client_for(new.full_key).get(f"{API}/account/keys").json()["results"]
    assert {(k["id"], k["name"]) for k in listed} == {
        (old.key_id, "deployer"),
        (new.key.key_id, "deployer"),
    }


def test_the_shared_name_stays_taken_for_new_keys(make_key, frozen):
    old = make_key(name="deployer")
    rotate(old.key_id)
    with pytest.raises(KeyRequestRefused):
        make_key(name="deployer")


def test_the_grace_period_defaults_to_24_hours(make_key, frozen):
    old = make_key()
    rotate(old.key_id)
    assert client_for(old).get(CURRENT).json()["expires_at"] == "2026-11-23T10:00:00.000Z"


def test_a_key_without_expiry_gets_one_at_the_grace_end_and_its_successor_none(make_key, frozen):
    old = make_key(expiry_days=None)
    new = rotate(old.key_id, grace_hours=168)
    assert client_for(old).get(CURRENT).json()["expires_at"] == "2026-11-29T10:00:00.000Z"
    assert client_for(new.full_key).get(CURRENT).json()["expires_at"] is None


@pytest.mark.parametrize("grace_hours", [-1, 169])
def test_it_refuses_a_grace_outside_0_to_168_hours(make_key, frozen, grace_hours):
    old = make_key()
    with pytest.raises(KeyRequestRefused):
        rotate(old.key_id, grace_hours=grace_hours)
    assert ApiKey.objects.get(key_id=old.key_id).replaced_by is None


def test_it_refuses_to_rotate_an_expired_key(make_key, frozen):
    old = make_key(expiry_days=1)
    frozen.tick(86400)
    with pytest.raises(KeyNotRotatable):
        rotate(old.key_id)


def test_it_refuses_to_rotate_a_revoked_key(make_key, frozen):
    old = make_key()
    api_key_revoke(key=ApiKey.objects.get(key_id=old.key_id), actor=TEST_ACTOR)
    with pytest.raises(KeyNotRotatable):
        rotate(old.key_id)


def test_it_refuses_to_rotate_a_key_twice(make_key, frozen):
    old = make_key()
    rotate(old.key_id)
    with pytest.raises(KeyNotRotatable):
        rotate(old.key_id)
    assert ApiKey.objects.filter(name=ApiKey.objects.get(key_id=old.key_id).name).count() == 2


def test_rotation_is_honoured_at_once_by_the_rotating_process(make_key, frozen):
    old = make_key()
    client = client_for(old)
    assert "Deprecation" not in client.get(CURRENT)  # cached here before the rotation
    rotate(old.key_id, grace_hours=0)
    assert error_of(client.get(CURRENT))["code"] == "token_expired"


def test_rotation_writes_a_panel_audit_row(make_key, frozen):
    old = make_key()
    rotate(old.key_id)
    row = AuditRecord.objects.get(action="key.rotate")
    assert (row.source, row.actor_email) == ("panel", "alice@acme.test")
