"""What a process remembers about keys is bounded: past the bound the least recently used key
is dropped, and a dropped key is read (or its use written) again, so answers stay right."""

from datetime import UTC, datetime

from django.utils import timezone
from freezegun import freeze_time

from accounts import key_records, usage
from accounts.models import ApiKey
from gshost.lru import LruDict
from tests.conftest import API, client_for, error_of

CURRENT = f"{API}/account/keys/current"


def test_past_its_bound_the_key_cache_drops_the_least_recently_used_key(make_key, monkeypatch):
    monkeypatch.setattr(key_records, "_cache", LruDict(2))
    first, second, third = make_key(), make_key(), make_key()
    for key in (first, second, third):
        assert client_for(key).get(CURRENT).status_code == 200
    assert first.key_id not in key_records._cache
    assert second.key_id in key_records._cache
    assert third.key_id in key_records._cache


def test_a_key_dropped_from_the_cache_is_read_again_with_its_current_state(make_key, monkeypatch):
    monkeypatch.setattr(key_records, "_cache", LruDict(1))
    first, second = make_key(), make_key()
    assert client_for(first).get(CURRENT).status_code == 200
    assert client_for(second).get(CURRENT).status_code == 200  # pushes the first one out
    ApiKey.objects.filter(key_id=first.key_id).update(revoked_at=timezone.now())
    assert error_of(client_for(first).get(CURRENT))["code"] == "token_revoked"


def test_past_its_bound_the_last_use_memory_drops_the_least_recently_used_key(
    make_key, monkeypatch
):
    monkeypatch.setattr(usage, "_last_written", LruDict(2))
    first, second, third = make_key(), make_key(), make_key()
    for key in (first, second, third):
        assert client_for(key).get(CURRENT).status_code == 200
    assert first.key_id not in usage._last_written
    assert second.key_id in usage._last_written
    assert third.key_id in usage._last_written


def test_a_key_dropped_from_the_last_use_memory_reports_its_last_use_and_writes_once_a_minute(
    make_key, monkeypatch
):
    monkeypatch.setattr(usage, "_last_written", LruDict(1))
    with freeze_time("2026-11-22 10:00:00") as frozen:
        first, second = make_key(), make_key()
        client_for(first).get(CURRENT, REMOTE_ADDR="203.0.113.9")
        client_for(second).get(CURRENT)  # pushes the first one out
        frozen.tick(5)
        body = client_for(first).get(CURRENT, REMOTE_ADDR="203.0.113.9").json()
    assert (body["last_used_at"], body["last_used_ip"]) == (
        "2026-11-22T10:00:05.000Z",
        "203.0.113.9",
    )
    # The database's conditional update still coalesces: the row keeps the minute's first use.
    stored = ApiKey.objects.get(key_id=first.key_id)
    assert stored.last_used_at == datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
