"""GET /account/audit: every call made with one of the organization's keys, accepted or refused,
and its panel actions, for a rolling 24 hours."""

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from freezegun import freeze_time

from accounts import keys
from accounts.models import ApiKey
from accounts.services import api_key_revoke
from audit.actors import Actor
from audit.buffer import audit_buffer
from audit.models import AuditRecord
from audit.services import audit_purge_expired
from tests.conftest import API, IssuedKey, client_for, error_of

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


AUDIT = f"{API}/account/audit"
CURRENT = f"{API}/account/keys/current"
RECORD_FIELDS = {
    "id",
    "occurred_at",
    "source",
    "actor",
    "method",
    "path",
    "action",
    "status_code",
    "error_code",
    "server_id",
    "ip",
    "user_agent",
    "request_id",
    "url",
    "details",
}


def well_formed_token(key_id: str) -> str:
    body = f"gsk_{key_id}_{'W' * 37}"
    return body + keys.checksum(body)


def audit_of(reader: IssuedKey, **filters: Any) -> list[dict[str, Any]]:
    response = client_for(reader).get(AUDIT, {"limit": 100, **filters})
    assert response.status_code == 200, response.content
    return response.json()["results"]


def api_records_of(reader: IssuedKey, key: IssuedKey) -> list[dict[str, Any]]:
    return audit_of(reader, key_id=key.key_id)


@pytest.fixture
def reader(make_key) -> IssuedKey:
    return make_key(["audit:read"], name="auditor")


# What is recorded


def test_it_records_an_accepted_call_with_every_contract_field(make_key, reader):
    caller = make_key()
    with freeze_time("2026-11-22 10:00:00.120"):
        client_for(caller).get(CURRENT, HTTP_USER_AGENT="deployer/2.1", HTTP_X_REQUEST_ID="req-42")
        [record] = api_records_of(reader, caller)
    assert re.fullmatch(r"aud_[0-9A-Za-z]{16,}", record.pop("id"))
    assert record == {
        "occurred_at": "2026-11-22T10:00:00.120Z",
        "source": "api",
        "actor": {"type": "api_key", "key_id": caller.key_id},
        "method": "GET",
        "path": "/api/public/v1/account/keys/current",
        "action": record["action"],
        "status_code": 200,
        "error_code": None,
        "server_id": None,
        "ip": "127.0.0.1",
        "user_agent": "deployer/2.1",
        "request_id": "req-42",
        "url": None,
        "details": None,
    }
    assert record["action"]


def test_the_record_carries_the_request_id_the_response_carried(make_key, reader):
    caller = make_key()
    response = client_for(caller).get(CURRENT)
    [record] = api_records_of(reader, caller)
    assert record["request_id"] == response["X-Request-Id"]


def test_it_records_panel_actions_with_the_person_as_actor(make_key, reader):
    record = audit_of(reader)[-1]  # the oldest: the auditor key's creation in the panel
    assert set(record) == RECORD_FIELDS
    assert (record["source"], record["actor"]) == (
        "panel",
        {"type": "user", "email": "alice@acme.test"},
    )
    assert record["action"] == "key.create"


def test_it_records_a_wrong_secret_for_a_known_key_id(make_key, reader):
    caller = make_key()
    client_for(well_formed_token(caller.key_id)).get(CURRENT)
    [record] = api_records_of(reader, caller)
    assert (record["status_code"], record["error_code"]) == (401, "invalid_token")


def test_it_records_a_call_refused_for_scope(make_key, reader):
    caller = make_key([])
    client_for(caller).get(f"{API}/servers")
    [record] = api_records_of(reader, caller)
    assert (record["status_code"], record["error_code"]) == (403, "insufficient_scope")


def test_it_records_a_server_not_found_with_the_server_id_asked_for(make_key, reader):
    caller = make_key(["servers:read"])
    client_for(caller).get(f"{API}/servers/srv_doesNotExist00000000")
    [record] = api_records_of(reader, caller)
    assert (record["status_code"], record["error_code"]) == (404, "server_not_found")
    assert record["server_id"] == "srv_doesNotExist00000000"


def test_it_records_a_rate_limited_call(make_key, reader, settings):
    settings.API_RATE_DEFAULT = "1/min"
    caller = make_key()
    with freeze_time("2026-11-22 10:00:05") as frozen:
        client_for(caller).get(CURRENT)
        frozen.tick(1)
        client_for(caller).get(CURRENT)
        records = api_records_of(reader, caller)
    assert [(r["status_code"], r["error_code"]) for r in records] == [
        (429, "rate_limited"),
        (200, None),
    ]


def test_it_records_calls_by_revoked_keys(make_key, reader):
    caller = make_key()
    api_key_revoke(key=ApiKey.objects.get(key_id=caller.key_id), actor=TEST_ACTOR)
    client_for(caller).get(CURRENT)
    [record] = api_records_of(reader, caller)
    assert (record["status_code"], record["error_code"]) == (401, "token_revoked")


def test_it_records_calls_by_expired_keys(make_key, reader):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        caller = make_key(expiry_days=1)
        frozen.tick(86400)
        client_for(caller).get(CURRENT)
        [record] = api_records_of(reader, caller)
    assert (record["status_code"], record["error_code"]) == (401, "token_expired")


@pytest.mark.parametrize(
    "token",
    [
        "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc" * 2,
        "gsk_Zz9Zz9Zz_" + "a" * 43,  # bad checksum
        well_formed_token("Zz9Zz9Zz"),  # unknown key id
        "gsk_short",
    ],
    ids=["foreign", "bad-checksum", "unknown-id", "malformed"],
)
def test_it_does_not_record_tokens_that_name_no_key(make_key, token):
    make_key()
    client_for(token).get(CURRENT)
    assert not AuditRecord.objects.filter(source="api").exists()


def test_it_does_not_record_a_call_without_a_token(make_key):
    make_key()
    client_for(None).get(CURRENT)
    assert not AuditRecord.objects.filter(source="api").exists()


def test_a_typo_in_a_known_keys_checksum_is_not_recorded(make_key):
    caller = make_key()
    typo = caller.full_key[:-1] + ("a" if caller.full_key[-1] != "a" else "b")
    client_for(typo).get(CURRENT)
    assert not AuditRecord.objects.filter(source="api").exists()


# Filters


def test_it_filters_by_key_id(make_key, reader):
    first, second = make_key(), make_key()
    client_for(first).get(CURRENT)
    client_for(second).get(CURRENT)
    assert {r["actor"]["key_id"] for r in audit_of(reader, key_id=first.key_id)} == {first.key_id}


def test_it_filters_by_status_code(make_key, reader):
    caller = make_key(["keys:read"])
    client_for(caller).get(CURRENT)
    client_for(caller).get(f"{API}/servers")
    records = audit_of(reader, status_code=403)
    assert [(r["actor"].get("key_id"), r["status_code"]) for r in records] == [(caller.key_id, 403)]


def test_it_filters_rejected_calls(make_key, reader):
    caller = make_key(["keys:read"])
    client_for(caller).get(CURRENT)
    client_for(caller).get(f"{API}/servers")
    client_for(well_formed_token(caller.key_id)).get(CURRENT)
    records = audit_of(reader, outcome="rejected")
    assert sorted(r["status_code"] for r in records) == [401, 403]


def test_it_filters_by_server_id(make_key, reader, acme_server, acme_other_server):
    caller = make_key(["servers:read"])
    client_for(caller).get(f"{API}/servers/{acme_server.id}")
    client_for(caller).get(f"{API}/servers/{acme_other_server.id}")
    client_for(caller).get(f"{API}/servers")
    records = audit_of(reader, server_id=acme_server.id)
    assert [(r["server_id"], r["path"]) for r in records] == [
        (acme_server.id, f"{API}/servers/{acme_server.id}")
    ]


def test_it_filters_by_since(make_key, reader):
    caller = make_key()
    with freeze_time("2026-11-22 10:00:00") as frozen:
        client_for(caller).get(CURRENT)
        frozen.tick(60)
        client_for(caller).get(f"{API}/servers")
        records = audit_of(reader, key_id=caller.key_id, since="2026-11-22T10:01:00Z")
    assert [r["occurred_at"] for r in records] == ["2026-11-22T10:01:00.000Z"]


def test_since_accepts_an_explicit_offset(make_key, reader):
    caller = make_key()
    with freeze_time("2026-11-22 10:00:00"):
        client_for(caller).get(CURRENT)
        later = audit_of(reader, key_id=caller.key_id, since="2026-11-22T11:00:01+01:00")
        earlier = audit_of(reader, key_id=caller.key_id, since="2026-11-22T11:00:00+01:00")
    assert (len(later), len(earlier)) == (0, 1)


def test_filters_combine(make_key, reader, acme_server):
    caller = make_key(["servers:read"])
    other = make_key(["servers:read"])
    client_for(caller).get(f"{API}/servers/{acme_server.id}")
    client_for(caller).get(f"{API}/servers/srv_doesNotExist00000000")
    client_for(other).get(f"{API}/servers/srv_doesNotExist00000000")
    records = audit_of(reader, key_id=caller.key_id, outcome="rejected")
    assert [(r["actor"]["key_id"], r["status_code"]) for r in records] == [(caller.key_id, 404)]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("status_code", "forbidden"),
        ("status_code", "4031"),
        ("status_code", "²⁰⁰"),
        ("outcome", "accepted"),
        ("since", "yesterday"),
        ("since", "2026-11-22T10:00:00"),  # no time zone
        ("since", "2026-13-45T10:00:00Z"),  # well formed, impossible
        ("key_id", "ab\x00cd"),  # PostgreSQL text cannot hold NUL
        ("server_id", "srv_\x00"),
    ],
)
def test_a_bad_filter_is_invalid_request_naming_it(make_key, reader, name, value):
    response = client_for(reader).get(AUDIT, {name: value})
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_request"
    assert list(error["fields"]) == [name]


@pytest.mark.parametrize("name", ["key_id", "status_code", "outcome", "server_id", "since"])
def test_an_empty_filter_means_unfiltered(make_key, reader, name):
    caller = make_key()
    client_for(caller).get(CURRENT)
    records = audit_of(reader, **{name: ""})
    assert [r["path"] for r in records if r["actor"].get("key_id") == caller.key_id] == [CURRENT]


def test_every_bad_filter_is_named_in_one_answer(make_key, reader):
    response = client_for(reader).get(AUDIT, {"since": "yesterday", "key_id": "ab\x00cd"})
    assert response.status_code == 400
    assert set(error_of(response)["fields"]) == {"since", "key_id"}


# The 24-hour window


def test_it_returns_records_up_to_24_hours_old(make_key, reader):
    caller = make_key()
    with freeze_time("2026-11-22 10:00:00") as frozen:
        client_for(caller).get(CURRENT)
        frozen.tick(24 * 3600 - 1)
        assert len(api_records_of(reader, caller)) == 1


def test_it_leaves_out_records_older_than_24_hours_even_before_the_purge(make_key, reader):
    caller = make_key()
    with freeze_time("2026-11-22 10:00:00") as frozen:
        client_for(caller).get(CURRENT)
        frozen.tick(24 * 3600 + 1)
        assert api_records_of(reader, caller) == []
    assert AuditRecord.objects.filter(actor_key_id=caller.key_id).exists()


def test_since_cannot_reach_beyond_the_window(make_key, reader):
    caller = make_key()
    with freeze_time("2026-11-22 10:00:00") as frozen:
        client_for(caller).get(CURRENT)
        frozen.tick(25 * 3600)
        assert audit_of(reader, key_id=caller.key_id, since="2026-11-20T00:00:00Z") == []


def test_the_purge_deletes_records_older_than_24_hours_only(make_key):
    caller = make_key()
    with freeze_time("2026-11-22 10:00:00") as frozen:
        client_for(caller).get(CURRENT)
        frozen.tick(12 * 3600)
        client_for(caller).get(f"{API}/servers")
        frozen.tick(12 * 3600 + 1)
        deleted = audit_purge_expired()
        remaining = AuditRecord.objects.filter(actor_key_id=caller.key_id)
        assert [r.path for r in remaining] == [f"{API}/servers"]
    assert deleted >= 1


def test_the_purge_answers_how_many_rows_went(acme):
    old = timezone.now() - timedelta(hours=25)
    AuditRecord.objects.bulk_create(
        AuditRecord(organization=acme, occurred_at=old, source="api", action="x") for _ in range(3)
    )
    assert audit_purge_expired() == 3


def test_the_purge_deletes_in_batches_until_nothing_expired_is_left(acme):
    old, recent = timezone.now() - timedelta(hours=25), timezone.now() - timedelta(hours=23)
    AuditRecord.objects.bulk_create(
        AuditRecord(organization=acme, occurred_at=at, source="api", action="x")
        for at in [old] * 7 + [recent] * 2
    )
    with CaptureQueriesContext(connection) as queries:
        assert audit_purge_expired(batch_rows=3) == 7
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("DELETE")]
    assert len(deletes) == 3
    assert AuditRecord.objects.filter(occurred_at=recent).count() == 2


# Isolation


def test_an_organization_never_sees_another_organizations_records(make_key, reader, charlie):
    foreign = make_key(membership=charlie)
    client_for(foreign).get(CURRENT)
    assert audit_of(reader, key_id=foreign.key_id) == []
    assert all(r["actor"].get("email") != "charlie@globex.test" for r in audit_of(reader))


def test_attempts_on_a_key_are_recorded_in_its_own_organization_only(make_key, charlie):
    acme_key = make_key()
    globex_reader = make_key(["audit:read"], membership=charlie)
    client_for(well_formed_token(acme_key.key_id)).get(CURRENT)
    assert audit_of(globex_reader, outcome="rejected") == []
    assert AuditRecord.objects.get(actor_key_id=acme_key.key_id).organization_id == (
        acme_key.organization_id
    )


def test_reading_the_audit_trail_needs_audit_read(make_key):
    response = client_for(make_key(["keys:read"])).get(AUDIT)
    assert response.status_code == 403
    assert error_of(response)["required_scope"] == "audit:read"


# Buffered writes


@pytest.fixture
def buffered_audit(settings):
    settings.AUDIT_FLUSH_INTERVAL_SECONDS = 3600  # the flusher thread never wakes in a test
    yield
    audit_buffer.flush()


def test_buffered_rows_are_not_written_during_the_request(make_key, buffered_audit):
    caller = make_key()
    client_for(caller).get(CURRENT)
    assert not AuditRecord.objects.filter(actor_key_id=caller.key_id).exists()


def test_buffered_rows_are_visible_to_the_next_audit_read_in_the_same_process(
    make_key, reader, buffered_audit
):
    caller = make_key()
    client_for(caller).get(CURRENT)
    client_for(well_formed_token(caller.key_id)).get(CURRENT)
    records = api_records_of(reader, caller)
    assert sorted(r["status_code"] for r in records) == [200, 401]
