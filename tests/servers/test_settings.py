"""Desired settings with their history, drift against what the runtime reports, and config
events that apply and revert settings at their times. No event fires for any of it."""

import re

import pytest
from django.utils import timezone
from freezegun import freeze_time

from audit.actors import Actor, ActorSource
from servers import tasks
from servers.errors import InvalidConfigEvent, InvalidSetting
from servers.game.config_events import (
    config_event_cancel,
    config_event_create,
    config_event_revert_now,
)
from servers.game.settings import desired_settings, settings_update
from servers.models import ConfigEvent, Server
from servers.runtime import runtime_sweep
from servers.services import PowerAction, server_power
from tests.conftest import API, client_for, error_of

SYSTEM = Actor.system("test")
UTC_TIME = "2026-11-22T{}.000Z"


def change(server, **values):
    return settings_update(server=server, values=values, actor=SYSTEM)


def fresh(server):
    return Server.objects.get(id=server.id)


@pytest.fixture
def reader(make_key):
    return client_for(make_key(["servers:read"]))


def test_a_server_starts_with_its_games_defaults(acme_server, acme_other_server):
    assert desired_settings(acme_server)["difficulty"] == "normal"
    assert "difficulty" not in desired_settings(acme_other_server)
    assert desired_settings(acme_other_server)["tick_rate"] == "64"


def test_a_change_is_recorded_once_per_setting_that_changed(acme_server):
    rows = change(acme_server, max_players="30", difficulty="normal")
    assert [(r.key, r.previous_value, r.new_value) for r in rows] == [("max_players", "20", "30")]
    assert desired_settings(fresh(acme_server))["max_players"] == "30"


@pytest.mark.parametrize(
    "values",
    [{"max_players": "0"}, {"difficulty": "nightmare"}, {"pvp": "maybe"}, {"tick_rate": "64"}],
)
def test_a_bad_value_or_a_setting_the_game_lacks_is_refused(acme_server, values):
    with pytest.raises(InvalidSetting):
        change(acme_server, **values)


@pytest.mark.parametrize(
    "value", ["one\ntwo", "one\rtwo", "one\u2028two", "one\u2029two", "bell\x07", "tab\there"]
)
def test_a_value_the_game_cannot_write_is_refused_when_saved(acme_server, value):
    """A game's settings file holds one value a line: a value that is not one printable line
    would block every start, so it is refused here, where it is saved."""
    with pytest.raises(InvalidSetting, match="one line of printable characters"):
        change(acme_server, motd=value)


@pytest.mark.parametrize("value", ["\u00b2", "9" * 5000, "\u0661"])
def test_a_number_that_is_no_whole_ascii_number_is_refused_not_a_crash(acme_server, value):
    with pytest.raises(InvalidSetting, match="a whole number"):
        change(acme_server, max_players=value)


def test_history_lists_changes_newest_first(reader, acme_server):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        change(acme_server, max_players="30")
        frozen.tick(60)
        settings_update(
            server=acme_server,
            values={"motd": "Hello"},
            actor=Actor(ActorSource.PANEL, user_email="a@b.test"),
        )
    body = reader.get(f"{API}/servers/{acme_server.id}/settings/history").json()
    assert set(body) == {"results", "next", "previous"}
    first, second = body["results"]
    assert re.fullmatch(r"chg_[0-9A-Za-z]{16,}", first["id"])
    assert first == {
        "id": first["id"],
        "key": "motd",
        "previous_value": "A gshost server",
        "new_value": "Hello",
        "source": "panel",
        "changed_by": "a@b.test",
        "config_event_id": None,
        "changed_at": UTC_TIME.format("10:01:00"),
    }
    assert (second["key"], second["changed_by"]) == ("max_players", None)


def test_history_pages_with_a_cursor(reader, acme_server):
    for players in ("21", "22", "23"):
        change(acme_server, max_players=players)
    first = reader.get(f"{API}/servers/{acme_server.id}/settings/history?limit=2").json()
    assert len(first["results"]) == 2 and first["next"]
    rest = reader.get(first["next"]).json()
    assert [r["new_value"] for r in rest["results"]] == ["21"]


def test_a_stopped_server_is_in_sync_after_a_change(
    reader, acme_server, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        change(acme_server, max_players="30")
    with freeze_time("2026-11-22 10:00:00"):
        body = reader.get(f"{API}/servers/{acme_server.id}/settings/drift").json()
    assert body == {"in_sync": True, "drift": [], "checked_at": UTC_TIME.format("10:00:00")}


def test_a_running_server_drifts_until_it_restarts(reader, acme_server, put_in_state):
    put_in_state(acme_server, "running")
    change(acme_server, max_players="30")
    body = reader.get(f"{API}/servers/{acme_server.id}/settings/drift").json()
    assert body["in_sync"] is False
    assert body["drift"] == [{"key": "max_players", "desired": "30", "actual": "20"}]
    with freeze_time(timezone.now()) as frozen:
        server_power(server=fresh(acme_server), action=PowerAction.RESTART, actor=SYSTEM)
        frozen.tick(5)
        runtime_sweep(timezone.now())
    assert reader.get(f"{API}/servers/{acme_server.id}/settings/drift").json()["in_sync"]


def test_settings_changes_fire_no_event(acme_server, published):
    change(acme_server, max_players="30")
    assert published == []


# Config events


def make_event(server, apply_at, revert_at=None, **changes):
    with freeze_time("2026-11-22 09:00:00"):
        return config_event_create(
            server=server,
            name="PvP weekend",
            changes=changes or {"pvp": "false"},
            apply_at=apply_at,
            revert_at=revert_at,
            created_by=None,
            actor=SYSTEM,
        )


def at(clock):
    return timezone.datetime.fromisoformat(f"2026-11-22T{clock}+00:00")


def tick_at(moment):
    with freeze_time(moment):
        tasks.tick()


def test_a_config_event_applies_at_its_time(acme_server):
    event = make_event(acme_server, at("10:00:00"), at("12:00:00"))
    tick_at("2026-11-22 09:59:00")
    assert fresh(acme_server).desired_settings.get("pvp") is None
    tick_at("2026-11-22 10:00:30")
    assert desired_settings(fresh(acme_server))["pvp"] == "false"
    assert ConfigEvent.objects.get(id=event.id).state == "applied"


def test_a_config_event_reverts_at_its_time(acme_server):
    make_event(acme_server, at("10:00:00"), at("12:00:00"))
    tick_at("2026-11-22 10:00:30")
    tick_at("2026-11-22 12:00:30")
    assert desired_settings(fresh(acme_server))["pvp"] == "true"
    assert ConfigEvent.objects.get().state == "reverted"


def test_after_downtime_it_applies_and_reverts_in_one_go(acme_server):
    make_event(acme_server, at("10:00:00"), at("12:00:00"))
    tick_at("2026-11-22 13:00:00")
    assert ConfigEvent.objects.get().state == "reverted"
    assert desired_settings(fresh(acme_server))["pvp"] == "true"
    keys = [c.source for c in fresh(acme_server).setting_changes.all()]
    assert keys == ["config_event", "config_event"]


def test_a_revert_leaves_a_setting_someone_changed_meanwhile(acme_server):
    make_event(acme_server, at("10:00:00"), at("12:00:00"), pvp="false", motd="Event!")
    tick_at("2026-11-22 10:00:30")
    change(fresh(acme_server), motd="Mine now")
    tick_at("2026-11-22 12:00:30")
    settings = desired_settings(fresh(acme_server))
    assert (settings["pvp"], settings["motd"]) == ("true", "Mine now")


def test_a_cancelled_event_never_applies(acme_server):
    event = make_event(acme_server, at("10:00:00"))
    assert config_event_cancel(event=event, actor=SYSTEM)
    tick_at("2026-11-22 10:00:30")
    assert desired_settings(fresh(acme_server))["pvp"] == "true"


def test_an_applied_event_can_be_reverted_early(acme_server):
    event = make_event(acme_server, at("10:00:00"), at("12:00:00"))
    tick_at("2026-11-22 10:00:30")
    assert config_event_revert_now(event=ConfigEvent.objects.get(id=event.id), actor=SYSTEM)
    assert desired_settings(fresh(acme_server))["pvp"] == "true"


def test_a_revert_time_before_the_apply_time_is_refused(acme_server):
    with pytest.raises(InvalidConfigEvent):
        make_event(acme_server, at("12:00:00"), at("10:00:00"))


def test_config_events_fire_no_event(acme_server, published):
    make_event(acme_server, at("10:00:00"), at("12:00:00"))
    tick_at("2026-11-22 13:00:00")
    assert published == []


def test_the_status_route_shows_each_event_and_where_it_stands(reader, acme_server):
    applied = make_event(acme_server, at("10:00:00"), at("12:00:00"))
    scheduled = make_event(acme_server, at("11:00:00"))
    tick_at("2026-11-22 10:30:00")
    with freeze_time("2026-11-22 10:30:00"):
        body = reader.get(f"{API}/servers/{acme_server.id}/config-events/status").json()
    assert body == {
        "events": [
            {
                "id": applied.id,
                "name": "PvP weekend",
                "state": "applied",
                "apply_at": UTC_TIME.format("10:00:00"),
                "revert_at": UTC_TIME.format("12:00:00"),
            },
            {
                "id": scheduled.id,
                "name": "PvP weekend",
                "state": "scheduled",
                "apply_at": UTC_TIME.format("11:00:00"),
                "revert_at": None,
            },
        ]
    }
    assert re.fullmatch(r"cfg_[0-9A-Za-z]{16,}", applied.id)


def test_settled_events_leave_the_status_route_after_a_day(reader, acme_server):
    make_event(acme_server, at("10:00:00"), at("12:00:00"))
    tick_at("2026-11-22 12:00:30")
    url = f"{API}/servers/{acme_server.id}/config-events/status"
    with freeze_time("2026-11-23 12:00:00"):
        assert [e["state"] for e in reader.get(url).json()["events"]] == ["reverted"]
    with freeze_time("2026-11-23 12:01:00"):
        assert reader.get(url).json()["events"] == []


def test_drift_and_history_need_servers_read(make_key, acme_server):
    client = client_for(make_key(["backups:read"]))
    for path in ("settings/history", "settings/drift", "config-events/status"):
        response = client.get(f"{API}/servers/{acme_server.id}/{path}")
        assert error_of(response)["required_scope"] == "servers:read"
