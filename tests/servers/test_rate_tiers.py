"""realtime-stats and config-events/status have the realtime tier (600/min); every other
server route the default tier. Small limits here keep the test quick."""

import pytest
from freezegun import freeze_time

from tests.conftest import API, client_for, error_of


@pytest.fixture
def small_limits(settings):
    settings.API_RATE_REALTIME = "3/min"
    settings.API_RATE_DEFAULT = "2/min"


def statuses(client, url, count):
    return [client.get(url).status_code for _ in range(count)]


@pytest.mark.parametrize("path", ["realtime-stats", "config-events/status"])
def test_the_realtime_routes_use_the_realtime_tier(make_key, acme_server, small_limits, path):
    client = client_for(make_key(["servers:read"]))
    url = f"{API}/servers/{acme_server.id}/{path}"
    with freeze_time("2026-11-22 10:00:05"):
        answers = statuses(client, url, 4)
        limited = client.get(url)
    assert answers == [200, 200, 200, 429]
    assert limited["X-RateLimit-Limit"] == "3"
    assert error_of(limited)["code"] == "rate_limited"


@pytest.mark.parametrize("path", ["players", "metrics", "migration-status", "capabilities"])
def test_other_server_routes_use_the_default_tier(make_key, acme_server, small_limits, path):
    client = client_for(make_key(["servers:read"]))
    with freeze_time("2026-11-22 10:00:05"):
        answers = statuses(client, f"{API}/servers/{acme_server.id}/{path}", 3)
    assert answers == [200, 200, 429]


def test_a_new_minute_opens_a_new_window(make_key, acme_server, small_limits):
    client = client_for(make_key(["servers:read"]))
    url = f"{API}/servers/{acme_server.id}/realtime-stats"
    with freeze_time("2026-11-22 10:00:05") as frozen:
        statuses(client, url, 4)
        frozen.move_to("2026-11-22 10:01:00")
        assert client.get(url).status_code == 200
