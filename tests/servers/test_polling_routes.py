"""The polling routes (status, players, stats, metrics, settings): shapes and scopes."""

import re

import pytest
from freezegun import freeze_time
from hypothesis import example, given
from hypothesis import strategies as st

from audit.actors import Actor
from gshost.errors import InvalidInput
from servers.fleet.moves import migration_begin
from servers.readings import WINDOW_PATTERN, parse_window
from tests.conftest import API, client_for, error_of

TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


@pytest.fixture
def reader(make_key):
    return client_for(make_key(["servers:read"]))


@pytest.fixture
def running(acme_server, put_in_state):
    with freeze_time("2026-11-22 06:00:00"):
        return put_in_state(acme_server, "running")


def test_players_of_a_running_server(reader, running):
    with freeze_time("2026-11-22 12:00:00"):
        body = reader.get(f"{API}/servers/{running.id}/players").json()
    assert set(body) == {"count", "max", "players"}
    assert body["count"] == len(body["players"]) > 0
    assert body["max"] == 20
    for player in body["players"]:
        assert set(player) == {"name", "joined_at"} and TIMESTAMP.fullmatch(player["joined_at"])


def test_a_stopped_server_has_no_players(reader, acme_server):
    body = reader.get(f"{API}/servers/{acme_server.id}/players").json()
    assert body == {"count": 0, "max": 20, "players": []}


def test_polling_players_twice_gives_the_same_answer(reader, running):
    with freeze_time("2026-11-22 12:00:00"):
        first = reader.get(f"{API}/servers/{running.id}/players").json()
        second = reader.get(f"{API}/servers/{running.id}/players").json()
    assert first == second


def test_realtime_stats_is_one_current_sample(reader, running):
    with freeze_time("2026-11-22 12:00:00"):
        body = reader.get(f"{API}/servers/{running.id}/realtime-stats").json()
    assert body["server_id"] == running.id
    assert body["state"] == "running"
    assert body["sampled_at"] == "2026-11-22T12:00:00.000Z"
    assert body["uptime_seconds"] == 6 * 3600
    assert set(body) == {
        "server_id", "state", "sampled_at", "cpu_percent", "memory_mb", "memory_limit_mb",
        "disk_mb", "network_in_kbps", "network_out_kbps", "players_online", "uptime_seconds",
    }  # fmt: skip


def test_metrics_default_to_one_hour_of_minutes(reader, running):
    with freeze_time("2026-11-22 12:00:30"):
        body = reader.get(f"{API}/servers/{running.id}/metrics").json()
    assert (body["window"], body["interval_seconds"]) == ("1h", 60)
    assert len(body["samples"]) == 61
    assert body["samples"][-1]["at"] == "2026-11-22T12:00:00.000Z"
    assert set(body["samples"][0]) == {
        "at", "cpu_percent", "memory_mb", "network_in_kbps", "network_out_kbps", "players_online"
    }  # fmt: skip


def test_metrics_over_a_day_keep_to_121_samples(reader, running):
    body = reader.get(f"{API}/servers/{running.id}/metrics?window=24h").json()
    assert (body["window"], body["interval_seconds"], len(body["samples"])) == ("24h", 720, 121)


@pytest.mark.parametrize("window", ["25h", "0h", "1d", "h", "-1h", "1.5h", "2m", "1441m"])
def test_a_bad_metrics_window_is_400(reader, acme_server, window):
    response = reader.get(f"{API}/servers/{acme_server.id}/metrics?window={window}")
    assert response.status_code == 400
    assert set(error_of(response)["fields"]) == {"window"}


def test_a_server_that_never_moved_has_migration_state_none(reader, acme_server):
    body = reader.get(f"{API}/servers/{acme_server.id}/migration-status").json()
    assert body == {
        "state": "none",
        "started_at": None,
        "completed_at": None,
        "previous_address": None,
        "new_address": None,
        "error": None,
    }


def test_migration_status_follows_a_migration(reader, acme_server):
    with freeze_time("2026-11-22 10:00:00"):
        migration_begin(
            server=acme_server, new_address="198.51.100.7:25565", actor=Actor.system("t")
        )
        body = reader.get(f"{API}/servers/{acme_server.id}/migration-status").json()
    assert body == {
        "state": "migrating",
        "started_at": "2026-11-22T10:00:00.000Z",
        "completed_at": None,
        "previous_address": acme_server.address,
        "new_address": "198.51.100.7:25565",
        "error": None,
    }


@pytest.mark.parametrize(
    "path",
    ["players", "realtime-stats", "metrics", "migration-status", "capabilities"],
)
def test_server_readings_need_servers_read(make_key, acme_server, path):
    response = client_for(make_key(["backups:read"])).get(f"{API}/servers/{acme_server.id}/{path}")
    assert response.status_code == 403
    assert error_of(response)["required_scope"] == "servers:read"


def _metrics_window_accepted(text: str) -> bool:
    try:
        parse_window(text)
    except InvalidInput:
        return False
    return True


@given(st.from_regex(r"[0-9]{0,5}[mhd]?", fullmatch=True))
@example("")
@example("5m")
@example("4m")
@example("1440m")
@example("1441m")
@example("24h")
@example("25h")
@example("05m")
def test_the_schemas_metrics_window_pattern_matches_exactly_what_is_accepted(text):
    assert (re.search(WINDOW_PATTERN, text) is not None) == _metrics_window_accepted(text)
