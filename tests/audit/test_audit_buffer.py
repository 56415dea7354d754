"""Buffered audit rows reach the database as they were recorded: COPY on PostgreSQL, a
multi-row INSERT elsewhere. Values come from the caller (path, user agent), so the COPY text
format must carry every character through."""

import logging
import re
import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connection

from accounts.services import organization_create
from audit.buffer import AuditBuffer, audit_buffer
from audit.models import AuditRecord
from tests.conftest import API, client_for

CURRENT = f"{API}/account/keys/current"
AWKWARD_TEXT = {
    "tab": "a\tb",
    "newline": "a\nb",
    "carriage return": "a\rb",
    "backslash": "a\\b",
    "backslash and N": "\\N",
    "backslash and t": "\\t",
    "end-of-data marker": "\\.",
    "trailing backslash": "ab\\",
    "non-ASCII": "déjà vu – 日本 🎮",
    "latin-1 control": "a\x7f\x85b",
    "empty": "",
}


@pytest.fixture
def buffered_audit(settings):
    settings.AUDIT_FLUSH_INTERVAL_SECONDS = 3600  # the flusher thread never wakes in a test
    yield
    audit_buffer.flush()


def flushed_record_of(key_id: str) -> AuditRecord:
    assert audit_buffer.flush() > 0
    return AuditRecord.objects.get(actor_key_id=key_id)


def row_for(organization_id: str, **values: Any) -> dict[str, Any]:
    return {
        "organization_id": organization_id,
        "occurred_at": datetime(2026, 11, 22, 10, 0, tzinfo=UTC),
        "source": "api",
        "actor_type": "api_key",
        "actor_key_id": "abcdEFGH",
        "action": "account.keys.current",
        **values,
    }


@pytest.mark.parametrize("text", AWKWARD_TEXT.values(), ids=AWKWARD_TEXT.keys())
def test_a_buffered_user_agent_is_stored_unchanged(make_key, buffered_audit, text):
    caller = make_key()
    client_for(caller).get(CURRENT, HTTP_USER_AGENT=text)
    assert flushed_record_of(caller.key_id).user_agent == text


def test_a_buffered_path_and_server_id_are_stored_unchanged(make_key, buffered_audit):
    caller = make_key(["servers:read"])
    server_id = "a\tb\\c\nd\re é"
    client_for(caller).get(f"{API}/servers/{quote(server_id)}")
    record = flushed_record_of(caller.key_id)
    assert (record.path, record.server_id) == (f"{API}/servers/{server_id}", server_id)


def test_a_buffered_row_without_an_address_stores_null(make_key, buffered_audit):
    caller = make_key()
    client_for(caller).get(CURRENT, REMOTE_ADDR="not-an-address")
    assert flushed_record_of(caller.key_id).ip is None


def test_a_buffered_row_keeps_the_instant_to_the_microsecond(acme, settings):
    settings.AUDIT_FLUSH_INTERVAL_SECONDS = 3600
    moment = datetime(2026, 7, 1, 12, 30, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    buffer = AuditBuffer()
    buffer.add(row_for(acme.id, occurred_at=moment))
    buffer.flush()
    assert AuditRecord.objects.get(actor_key_id="abcdEFGH").occurred_at == moment


def test_a_buffered_row_gets_missing_fields_from_the_model_defaults(acme, settings):
    settings.AUDIT_FLUSH_INTERVAL_SECONDS = 3600
    buffer = AuditBuffer()
    buffer.add(row_for(acme.id))
    buffer.flush()
    record = AuditRecord.objects.get(actor_key_id="abcdEFGH")
    assert (record.path, record.status_code, record.ip) == ("", None, None)


def test_buffered_rows_get_distinct_audit_ids(make_key, buffered_audit):
    caller = make_key()
    for _ in range(3):
        client_for(caller).get(CURRENT)
    audit_buffer.flush()
    ids = list(AuditRecord.objects.filter(actor_key_id=caller.key_id).values_list("id", flat=True))
    assert len(set(ids)) == 3
    assert all(re.fullmatch(r"aud_[0-9A-Za-z]{20}", i) for i in ids), ids


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL text refuses NUL")
def test_a_batch_with_a_nul_character_is_refused_whole_and_kept(acme, settings, caplog):
    settings.AUDIT_FLUSH_INTERVAL_SECONDS = 3600
    buffer = AuditBuffer()
    buffer.add(row_for(acme.id, user_agent="fine"))
    buffer.add(row_for(acme.id, user_agent="a\x00b"))
    with caplog.at_level(logging.ERROR, logger="audit.buffer"):
        assert buffer.flush() == 0
        assert buffer.flush() == 0
    assert not AuditRecord.objects.filter(actor_key_id="abcdEFGH").exists()
    assert [r.getMessage() for r in caplog.records] == [
        "Could not write 2 audit rows; keeping them for the next flush"
    ] * 2


@pytest.mark.django_db(transaction=True)  # the old foreign key was checked only at commit
def test_a_row_buffered_for_an_organization_deleted_since_does_not_hold_back_its_batch(settings):
    settings.AUDIT_FLUSH_INTERVAL_SECONDS = 3600
    deleted = organization_create(slug="deleted", name="Deleted")
    kept = organization_create(slug="kept", name="Kept")
    buffer = AuditBuffer()
    buffer.add(row_for(deleted.id, actor_key_id="deletedA"))
    buffer.add(row_for(kept.id, actor_key_id="keptKEYA"))
    deleted.delete()
    assert buffer.flush() == 2
    assert AuditRecord.objects.filter(organization_id=kept.id).count() == 1


def test_deleting_an_organization_deletes_its_audit_records(acme, globex, settings):
    settings.AUDIT_FLUSH_INTERVAL_SECONDS = 3600
    buffer = AuditBuffer()
    buffer.add(row_for(acme.id))
    buffer.add(row_for(globex.id))
    buffer.flush()
    acme.delete()
    assert list(AuditRecord.objects.values_list("organization_id", flat=True)) == [globex.id]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's own index list")
def test_writing_an_audit_row_maintains_only_the_primary_key_listing_and_purge_indexes(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s ORDER BY indexname",
            [AuditRecord._meta.db_table],
        )
        columns = [re.search(r"\((.*)\)", row[0]).group(1) for row in cursor.fetchall()]
    assert sorted(columns) == ["id", "occurred_at", "organization_id, occurred_at, id"]


def test_a_flusher_that_died_is_replaced_by_the_next_row(settings, monkeypatch):
    settings.AUDIT_FLUSH_INTERVAL_SECONDS = 0.001
    monkeypatch.setattr(threading, "excepthook", lambda args: None)
    buffer = AuditBuffer()
    flushers: list[threading.Thread] = []

    def dying_flush() -> int:
        flushers.append(threading.current_thread())
        raise RuntimeError("the flusher dies")

    monkeypatch.setattr(buffer, "flush", dying_flush)
    for expected in (1, 2):
        buffer.add({})
        for _ in range(500):
            if len(flushers) == expected:
                break
            time.sleep(0.01)
        flushers[-1].join(timeout=5)
    assert len(flushers) == 2
    assert flushers[0] is not flushers[1]


def test_a_nul_in_a_callers_path_or_user_agent_is_stored_as_a_replacement_character(
    make_key, buffered_audit
):
    caller = make_key(scopes=["servers:read"])
    client = client_for(caller.full_key)
    client.get(f"{API}/servers/srv_a%00b", HTTP_USER_AGENT="bot")
    client.get(CURRENT, HTTP_USER_AGENT="bot")
    assert audit_buffer.flush() == 2
    paths = set(
        AuditRecord.objects.filter(actor_key_id=caller.key_id).values_list("path", "server_id")
    )
    assert paths == {(f"{API}/servers/srv_a\ufffdb", "srv_a\ufffdb"), (CURRENT, "")}
