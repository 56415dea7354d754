"""Failed authentications naming a key are audited at most 60 per key and minute; one row per
key and minute then says how many more there were."""

from typing import Any

import pytest
from freezegun import freeze_time

from audit import failed_auth
from audit.models import AuditRecord
from tests.accounts.test_authentication import well_formed_token
from tests.conftest import client_for

CURRENT = "/api/public/v1/account/keys/current"


@pytest.fixture(autouse=True)
def no_sweeper(monkeypatch) -> None:
    """The tests write the due summaries themselves, inside their own transaction."""
    monkeypatch.setattr(failed_auth, "start_sweeper", lambda: None)


def rows(key_id: str, **filters: Any) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(actor_key_id=key_id, **filters).order_by("occurred_at"))


def fail(key_id: str, times: int, address: str = "198.51.100.7") -> list[int]:
    client = client_for(well_formed_token(key_id))
    return [client.get(CURRENT, REMOTE_ADDR=address).status_code for _ in range(times)]


def test_it_records_at_most_60_failures_per_key_and_minute_even_past_the_ip_limit(make_key):
    key = make_key()
    with freeze_time("2026-11-23 10:00:05"):
        statuses = fail(key.key_id, 95)
    assert statuses.count(429) > 0  # the per-address limit answered too
    assert len(rows(key.key_id)) == 60


def test_one_row_says_how_many_more_were_refused_once_the_minute_is_over(make_key):
    key = make_key()
    with freeze_time("2026-11-23 10:00:05") as frozen:
        fail(key.key_id, 95)
        assert failed_auth.write_due_summaries() == 0  # the minute is not over yet
        frozen.move_to("2026-11-23 10:01:02")
        assert failed_auth.write_due_summaries() == 1
        assert failed_auth.write_due_summaries() == 0
    [summary] = rows(key.key_id, action="auth.failures_not_recorded")
    assert summary.path.startswith("35 more failed authentications naming this key")
    assert "10:00:00Z to 10:01:00Z" in summary.path
    assert (summary.organization_id, summary.status_code) == (key.organization_id, 401)


def test_the_limit_is_per_key_and_per_minute(make_key):
    first, second = make_key(), make_key()
    with freeze_time("2026-11-23 10:00:05") as frozen:
        fail(first.key_id, 70, "198.51.100.7")
        fail(second.key_id, 5, "198.51.100.8")
        frozen.move_to("2026-11-23 10:01:05")
        fail(first.key_id, 3, "198.51.100.9")
    assert len(rows(second.key_id)) == 5
    assert len(rows(first.key_id, action="account.keys.current")) == 63


def test_the_keys_own_calls_are_still_recorded_past_the_limit(make_key):
    key = make_key()
    with freeze_time("2026-11-23 10:00:05"):
        fail(key.key_id, 65)
        assert client_for(key).get(CURRENT).status_code == 200
    assert len(rows(key.key_id, status_code=200)) == 1
