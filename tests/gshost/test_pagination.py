"""Cursor pagination, seen through GET /account/audit and GET /account/keys: `?limit=` 1-100
(default 50), newest first, every row reachable exactly once while new rows keep arriving."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from freezegun import freeze_time

from audit.models import AuditRecord
from gshost.api.pagination import CURSOR_PATTERN
from tests.conftest import API, IssuedKey, client_for, error_of

AUDIT = f"{API}/account/audit"
KEYS = f"{API}/account/keys"


def seed_records(organization_id: str, count: int, *, spacing: timedelta) -> list[str]:
    """`count` panel records, the newest `spacing` ago, each older one `spacing` before it."""
    now = timezone.now()
    rows = [
        AuditRecord(
            organization_id=organization_id,
            occurred_at=now - spacing * (i + 1),
            source="panel",
            actor_type="user",
            actor_email="seed@acme.test",
            action="key.create",
        )
        for i in range(count)
    ]
    AuditRecord.objects.bulk_create(rows)
    return [row.id for row in rows]


def walk(
    reader: IssuedKey, url: str, between_pages: Callable[[], Any] = lambda: None
) -> list[dict[str, Any]]:
    client, seen = client_for(reader), []
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        body = response.json()
        seen.extend(body["results"])
        url = body["next"]
        between_pages()
    return seen


@pytest.fixture
def reader(make_key) -> IssuedKey:
    return make_key(["audit:read", "keys:read"], name="reader")


def results_of(reader: IssuedKey, url: str, **params: Any) -> list[dict[str, Any]]:
    response = client_for(reader).get(url, params)
    assert response.status_code == 200, response.content
    return response.json()["results"]


# Limit


def test_a_page_holds_50_rows_by_default(reader):
    seed_records(reader.organization_id, 60, spacing=timedelta(seconds=1))
    assert len(results_of(reader, AUDIT)) == 50


def test_a_page_holds_up_to_100_rows(reader):
    seed_records(reader.organization_id, 120, spacing=timedelta(seconds=1))
    assert len(results_of(reader, AUDIT, limit=100)) == 100


def test_a_larger_limit_is_clamped_to_100(reader):
    seed_records(reader.organization_id, 120, spacing=timedelta(seconds=1))
    assert len(results_of(reader, AUDIT, limit=500)) == 100
    assert len(results_of(reader, AUDIT, limit="9" * 5000)) == 100
    assert len(results_of(reader, AUDIT, limit="0" * 20 + "3")) == 3


def test_a_limit_of_one_is_honoured(reader):
    seed_records(reader.organization_id, 3, spacing=timedelta(seconds=1))
    assert len(results_of(reader, AUDIT, limit=1)) == 1


@pytest.mark.parametrize(
    "limit", ["0", "-1", "abc", "1.5", "10e1", "²", "", " 5", "+5", "1_0", "٣"]
)
def test_a_limit_that_is_not_a_positive_integer_is_invalid_request(reader, limit):
    response = client_for(reader).get(AUDIT, {"limit": limit})
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_request"
    assert list(error["fields"]) == ["limit"]


def test_the_keys_list_honours_the_limit_too(make_key, reader):
    for _ in range(3):
        make_key()
    assert len(results_of(reader, KEYS, limit=2)) == 2


# Cursor


BAD_CURSORS = {
    "garbage": "not-a-cursor!",
    "a-digit": "0",
    "no-direction": "01732270503120000aud_x",
    "short-time": "n1732270503aud_x",
    "no-id": "n1732270503120000",
    "id-with-a-dash": "n1732270503120000aud-x",
    "too-long": "n1732270503120000" + "a" * 41,
    "old-base64-json": "eyJ0IjoiMjAyNi0xMS0yMlQxMDowMDowMCswMDowMCIsImkiOiIxIiwiYiI6ZmFsc2V9",
}


@pytest.mark.parametrize("cursor", BAD_CURSORS.values(), ids=BAD_CURSORS.keys())
@pytest.mark.parametrize("url", [AUDIT, KEYS], ids=["audit", "keys"])
def test_a_cursor_outside_the_schemas_pattern_is_invalid_request(reader, url, cursor):
    response = client_for(reader).get(url, {"cursor": cursor})
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"


@pytest.mark.parametrize(
    "cursor", ["n0000000000000000a", "p9999999999999999zz_9", "n1" + "0" * 15 + "1"]
)
@pytest.mark.parametrize("url", [AUDIT, KEYS], ids=["audit", "keys"])
def test_any_cursor_of_the_schemas_pattern_is_a_position_in_the_list(reader, url, cursor):
    response = client_for(reader).get(url, {"cursor": cursor})
    assert response.status_code == 200, response.content
    assert set(response.json()) == {"results", "next", "previous"}


def test_the_cursor_pattern_is_the_schemas(client):
    """Of every page of rows; a directory's listing (files) has cursors of its own."""
    schema = client.get(f"{API}/schema/?format=json").json()
    cursors = [
        parameter["schema"]
        for route, path in schema["paths"].items()
        if not route.endswith("/files")
        for operation in path.values()
        if isinstance(operation, dict)
        for parameter in operation.get("parameters", [])
        if parameter["name"] == "cursor"
    ]
    assert cursors and all(c["pattern"] == CURSOR_PATTERN for c in cursors)


# Order and links


def test_rows_come_newest_first(reader):
    seed_records(reader.organization_id, 10, spacing=timedelta(minutes=1))
    moments = [r["occurred_at"] for r in results_of(reader, AUDIT)]
    assert moments == sorted(moments, reverse=True)


def test_a_single_page_has_no_links(reader):
    body = client_for(reader).get(AUDIT).json()
    assert (body["next"], body["previous"]) == (None, None)


def test_the_next_link_keeps_the_limit_and_filters(reader):
    seed_records(reader.organization_id, 5, spacing=timedelta(seconds=1))
    client = client_for(reader)
    first = client.get(AUDIT, {"limit": 2, "key_id": ""}).json()
    assert first["next"].startswith("http://testserver/api/public/v1/account/audit?")
    assert "limit=2" in first["next"]
    assert "key_id=" in first["next"]
    assert len(client.get(first["next"]).json()["results"]) == 2


def test_following_next_links_with_a_filter_stays_within_the_filter(make_key, reader):
    caller = make_key()
    for _ in range(5):
        client_for(caller).get(f"{API}/account/keys/current")
    seed_records(reader.organization_id, 5, spacing=timedelta(seconds=1))
    seen = walk(reader, f"{AUDIT}?limit=2&key_id={caller.key_id}")
    assert [r["actor"]["key_id"] for r in seen] == [caller.key_id] * 5


def test_the_previous_link_leads_back_to_the_first_page(reader):
    seed_records(reader.organization_id, 9, spacing=timedelta(seconds=1))
    client = client_for(reader)
    with freeze_time(timezone.now()):  # the reader's own calls must not change page one
        first = client.get(AUDIT, {"limit": 4}).json()
        second = client.get(first["next"]).json()
        back = client.get(second["previous"]).json()
    assert first["previous"] is None
    assert [r["id"] for r in back["results"]] == [r["id"] for r in first["results"]]


def test_the_last_page_has_no_next_link(reader):
    seed_records(reader.organization_id, 5, spacing=timedelta(seconds=1))
    client = client_for(reader)
    body = client.get(AUDIT, {"limit": 4}).json()
    last = client.get(body["next"]).json()
    assert last["next"] is None
    assert last["previous"] is not None


# Stability


def test_paging_reaches_every_row_exactly_once_while_new_rows_arrive(reader):
    old = seed_records(reader.organization_id, 45, spacing=timedelta(seconds=10))
    arrived: list[str] = []

    def more_rows_arrive() -> None:
        arrived.extend(seed_records(reader.organization_id, 3, spacing=timedelta(milliseconds=1)))

    seen = [r["id"] for r in walk(reader, f"{AUDIT}?limit=10", more_rows_arrive)]
    assert arrived  # rows really did arrive between pages
    assert sorted(i for i in seen if i in old) == sorted(old)
    assert len(seen) == len(set(seen))


def test_rows_sharing_a_timestamp_still_page_correctly(reader):
    with freeze_time("2026-11-22 10:00:00"):
        tied = seed_records(reader.organization_id, 25, spacing=timedelta(0))
        seen = walk(reader, f"{AUDIT}?limit=7")
    seen_ids = [r["id"] for r in seen]
    assert len(seen_ids) == len(set(seen_ids))
    assert set(tied) <= set(seen_ids)
    tied_in_order = [i for i in seen_ids if i in tied]
    by_id = AuditRecord.objects.filter(id__in=tied).order_by("-id")  # the database's collation
    assert tied_in_order == list(by_id.values_list("id", flat=True))


def test_keys_created_in_the_same_instant_page_correctly(make_key):
    with freeze_time("2026-11-22 10:00:00"):
        reader = make_key(["keys:read"])
        made = [make_key().key_id for _ in range(7)]
        seen = [k["id"] for k in walk(reader, f"{KEYS}?limit=3")]
    assert sorted(seen) == sorted([*made, reader.key_id])
    assert len(seen) == len(set(seen))


def test_every_row_of_the_window_is_reachable(reader):
    old = seed_records(reader.organization_id, 230, spacing=timedelta(minutes=6))  # ~23 h
    seen = {r["id"] for r in walk(reader, f"{AUDIT}?limit=100")}
    assert set(old) <= seen
