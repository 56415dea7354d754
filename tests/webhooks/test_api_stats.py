"""GET /webhooks/{id}/stats: counts, success rate, latency and the series, from delivery rows."""

import re
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time
from hypothesis import example, given
from hypothesis import strategies as st

from audit.actors import Actor
from tests.conftest import client_for, error_of
from tests.webhooks.webhook_fixtures import (
    HOOKS,
    admin_fixture,  # noqa: F401
    admin_key_fixture,  # noqa: F401
    make_delivery,
    outsider_fixture,  # noqa: F401
    webhook_fixture,  # noqa: F401
)
from webhooks.errors import InvalidWindow
from webhooks.health.rollup import (
    apply_changes,
    bucket_bounds,
    interpolated_percentile,
    latency_bucket,
    settled_changes,
)
from webhooks.health.stats import WINDOW_PATTERN, parse_window
from webhooks.models import DeliveryStatus
from webhooks.services import webhook_create

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


pytestmark = pytest.mark.usefixtures("frozen")

NOW = datetime.fromisoformat("2026-11-22T12:30:00+00:00")


@pytest.fixture
def frozen():
    with freeze_time(NOW):
        yield


def stats(client, webhook, window=None):
    query = {} if window is None else {"window": window}
    return client.get(f"{HOOKS}/{webhook.id}/stats", query)


def delivered(webhook, *, ago, status=DeliveryStatus.SUCCESS, latency_ms=None):
    """A delivery row in `status`, counted as the engine counts it when it settles one."""
    created = NOW - ago
    delivery = make_delivery(webhook, status=status, created_at=created)
    apply_changes(
        settled_changes(
            webhook_id=webhook.id,
            created_at=created,
            before=DeliveryStatus.PENDING,
            after=status,
            latency_ms=latency_ms,
        )
    )
    return delivery


def test_it_counts_the_deliveries_of_the_window_by_outcome(admin, webhook):
    delivered(webhook, ago=timedelta(minutes=5))
    delivered(webhook, ago=timedelta(hours=2))
    delivered(webhook, ago=timedelta(hours=3), status=DeliveryStatus.FAILED)
    delivered(webhook, ago=timedelta(minutes=1), status=DeliveryStatus.RETRY_SCHEDULED)
    delivered(webhook, ago=timedelta(minutes=1), status=DeliveryStatus.PENDING)
    delivered(webhook, ago=timedelta(hours=26))  # before 11:00 yesterday: outside 24h
    body = stats(admin, webhook).json()
    assert body["window"] == "24h"
    assert (body["deliveries"], body["succeeded"], body["failed"], body["pending"]) == (5, 2, 1, 2)


def test_it_gives_the_success_rate_of_settled_deliveries(admin, webhook):
    for _ in range(3):
        delivered(webhook, ago=timedelta(minutes=5))
    delivered(webhook, ago=timedelta(minutes=5), status=DeliveryStatus.FAILED)
    delivered(webhook, ago=timedelta(minutes=5), status=DeliveryStatus.PENDING)
    assert stats(admin, webhook).json()["success_rate"] == 0.75


def test_it_gives_a_null_success_rate_when_nothing_settled(admin, webhook):
    delivered(webhook, ago=timedelta(minutes=5), status=DeliveryStatus.PENDING)
    body = stats(admin, webhook).json()
    assert body["success_rate"] is None
    assert body["latency_ms"] == {"p50": None, "p95": None}


def test_it_gives_latency_percentiles_within_five_percent(admin, webhook):
    for latency in range(10, 1010, 10):  # 10 ... 1000 ms
        delivered(webhook, ago=timedelta(minutes=5), latency_ms=latency)
    latency = stats(admin, webhook).json()["latency_ms"]
    assert 500 * 0.95 <= latency["p50"] <= 510 * 1.05
    assert 950 * 0.95 <= latency["p95"] <= 960 * 1.05


def test_it_leaves_failed_deliveries_out_of_the_latency(admin, webhook):
    delivered(webhook, ago=timedelta(minutes=5), latency_ms=20)
    delivered(webhook, ago=timedelta(minutes=5), status=DeliveryStatus.FAILED, latency_ms=9000)
    latency = stats(admin, webhook).json()["latency_ms"]
    assert 19 <= latency["p50"] <= latency["p95"] <= 21


def test_it_gives_one_bucket_per_hour(admin, webhook):
    delivered(webhook, ago=timedelta(minutes=10))  # 12:20
    delivered(webhook, ago=timedelta(minutes=50), status=DeliveryStatus.FAILED)  # 11:40
    series = stats(admin, webhook, "3h").json()["series"]
    assert [bucket["at"] for bucket in series] == [
        "2026-11-22T09:00:00.000Z",
        "2026-11-22T10:00:00.000Z",
        "2026-11-22T11:00:00.000Z",
        "2026-11-22T12:00:00.000Z",
    ]
    assert series[2] == {"at": "2026-11-22T11:00:00.000Z", "succeeded": 0, "failed": 1}
    assert series[3] == {"at": "2026-11-22T12:00:00.000Z", "succeeded": 1, "failed": 0}


def test_it_gives_one_bucket_per_day_beyond_48_hours(admin, webhook):
    delivered(webhook, ago=timedelta(days=2))
    series = stats(admin, webhook, "3d").json()["series"]
    assert [bucket["at"] for bucket in series] == [
        "2026-11-19T00:00:00.000Z",
        "2026-11-20T00:00:00.000Z",
        "2026-11-21T00:00:00.000Z",
        "2026-11-22T00:00:00.000Z",
    ]
    assert series[1]["succeeded"] == 1  # 2026-11-20T12:30


def test_it_counts_only_this_webhooks_deliveries(admin, webhook, acme):
    other, _ = webhook_create(
        organization=acme, url=webhook.url, events=["server.crashed"], actor=TEST_ACTOR
    )
    delivered(other, ago=timedelta(minutes=5))
    assert stats(admin, webhook).json()["deliveries"] == 0


@pytest.mark.parametrize("window", ["0h", "30m", "8d", "169h", "1w", "h", "24", "-1h", "1.5h"])
def test_it_refuses_a_bad_window_naming_the_field(admin, webhook, window):
    response = stats(admin, webhook, window)
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"
    assert "window" in error_of(response)["fields"]


@pytest.mark.parametrize(
    ("text", "hours"), [("1h", 1), ("24h", 24), ("48h", 48), ("7d", 168), ("168h", 168)]
)
def test_it_accepts_windows_from_an_hour_to_a_week(text, hours):
    assert parse_window(text) == timedelta(hours=hours)


def test_it_needs_the_read_scope(make_key, webhook):
    response = stats(client_for(make_key(["webhooks:write"])), webhook)
    assert error_of(response)["required_scope"] == "webhooks:read"


def test_it_hides_another_organizations_webhook(outsider, webhook):
    assert stats(outsider, webhook).status_code == 404


def test_it_counts_a_failure_turned_success_once_as_a_success(admin, webhook):
    delivered(webhook, ago=timedelta(minutes=5), status=DeliveryStatus.FAILED)
    apply_changes(
        settled_changes(
            webhook_id=webhook.id,
            created_at=NOW - timedelta(minutes=5),
            before=DeliveryStatus.FAILED,
            after=DeliveryStatus.SUCCESS,
            latency_ms=300,
        )
    )
    body = stats(admin, webhook).json()
    assert (body["succeeded"], body["failed"]) == (1, 0)


@pytest.mark.parametrize("latency", [2, 37, 812, 65_000, 3_600_000])
def test_it_puts_a_latency_in_a_bucket_within_five_percent(latency):
    low, high = bucket_bounds(latency_bucket(latency))
    assert low < latency <= high
    assert high / low <= 1.0501


def test_it_answers_no_percentile_without_successes():
    assert interpolated_percentile([], 0.5) is None


def _accepted(text: str) -> bool:
    try:
        parse_window(text)
    except InvalidWindow:
        return False
    return True


@given(st.from_regex(r"[0-9]{1,4}[hdmHw]?", fullmatch=True))
@example("1h")
@example("168h")
@example("169h")
@example("0h")
@example("01h")
@example("1d")
@example("7d")
@example("8d")
@example("0d")
def test_the_schemas_window_pattern_matches_exactly_what_is_accepted(text):
    assert (re.search(WINDOW_PATTERN, text) is not None) == _accepted(text)


def test_the_schema_states_the_window_pattern(admin):
    schema = admin.get("/api/public/v1/schema/?format=json").json()
    [parameter] = [
        parameter
        for parameter in schema["paths"]["/api/public/v1/webhooks/{webhook_id}/stats"]["get"][
            "parameters"
        ]
        if parameter["name"] == "window"
    ]
    assert parameter["schema"]["pattern"] == WINDOW_PATTERN
