"""The completed minutes agent nodes send in their heartbeats: checked, stored once per server
and minute (only for the node's own servers), and purged after 24 h."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils.module_loading import import_string
from django_q.models import Schedule
from freezegun import freeze_time

from audit.actors import Actor
from servers.agents.minutes import server_minutes_purge_expired
from servers.models import Server, ServerMinute
from servers.services import server_create
from tests.servers.node_fixtures import register

NOW = "2026-11-26 10:30:20"


def minute(at="2026-11-26T10:29:00Z", cpu=2.5, memory=40.2, players=1):
    return {"at": at, "cpu_percent": cpu, "memory_mb": memory, "players_online": players}


def heartbeat(token, readings, servers=None):
    body = {"agent_version": "1", "outbox_id": "box-1", "servers": servers or {},
            "readings": readings}  # fmt: skip
    return Client().post(
        "/internal/nodes/heartbeat", json.dumps(body), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip


def stored(server):
    rows = ServerMinute.objects.filter(server=server).order_by("at")
    return [(row.at, row.cpu_percent, row.memory_mb, row.players_online) for row in rows]


def at(text):
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@freeze_time(NOW)
def test_a_heartbeats_minutes_are_stored(demo_server, node_token):
    minutes = [minute("2026-11-26T10:28:00Z", 1.0, 30.5, 0), minute("2026-11-26T10:29:00Z")]
    response = heartbeat(node_token, {demo_server.id: {"minutes": minutes}})
    assert response.status_code == 200
    assert stored(demo_server) == [
        (at("2026-11-26 10:28"), 1.0, 30.5, 0),
        (at("2026-11-26 10:29"), 2.5, 40.2, 1),
    ]


@freeze_time(NOW)
def test_minutes_with_another_offset_are_stored_at_their_utc_minute(demo_server, node_token):
    heartbeat(node_token, {demo_server.id: {"minutes": [minute("2026-11-26T12:29:00+02:00")]}})
    assert stored(demo_server)[0][0] == at("2026-11-26 10:29")


@freeze_time(NOW)
def test_a_heartbeats_minutes_are_one_select_and_one_insert(demo_server, node_token):
    assert heartbeat(node_token, {}).status_code == 200  # the node is known from now on
    minutes = [minute(f"2026-11-26T10:{m:02}:00Z") for m in range(20, 30)]
    with CaptureQueriesContext(connection) as queries:
        assert heartbeat(node_token, {demo_server.id: {"minutes": minutes}}).status_code == 200
    assert [query["sql"].split()[0] for query in queries.captured_queries] == [
        "UPDATE",
        "SELECT",
        "INSERT",
    ]
    assert len(stored(demo_server)) == 10


@freeze_time(NOW)
def test_a_minute_sent_again_is_ignored(demo_server, node_token):
    heartbeat(node_token, {demo_server.id: {"minutes": [minute(cpu=2.5)]}})
    again = heartbeat(node_token, {demo_server.id: {"minutes": [minute(cpu=9.0), minute(
        "2026-11-26T10:30:00Z", cpu=3.0)]}})  # fmt: skip
    assert again.status_code == 200
    assert [(row[0], row[1]) for row in stored(demo_server)] == [
        (at("2026-11-26 10:29"), 2.5),
        (at("2026-11-26 10:30"), 3.0),
    ]


@freeze_time(NOW)
def test_minutes_of_a_server_of_another_node_are_ignored(demo_server):
    _other, token = register("other")
    response = heartbeat(token, {demo_server.id: {"minutes": [minute()]}})
    assert response.status_code == 200
    assert stored(demo_server) == []


@freeze_time(NOW)
def test_minutes_of_a_stopped_server_are_stored(demo_server, node_token):
    readings = {demo_server.id: {"settings": {}, "minutes": [minute()]}}
    assert heartbeat(node_token, readings, {demo_server.id: "stopped"}).status_code == 200
    assert len(stored(demo_server)) == 1


@freeze_time(NOW)
def test_minutes_older_than_a_day_or_ahead_of_the_clock_are_not_stored(demo_server, node_token):
    minutes = [
        minute("2026-11-25T10:29:00Z"),
        minute("2026-11-26T10:31:00Z"),  # a node's clock a little ahead
        minute("2026-11-26T11:00:00Z"),
    ]
    assert heartbeat(node_token, {demo_server.id: {"minutes": minutes}}).status_code == 200
    assert [row[0] for row in stored(demo_server)] == [at("2026-11-26 10:31")]


BAD_MINUTES = [
    "not a list",
    [minute(f"2026-11-26T09:{m:02}:00Z") for m in range(60)] + [minute()],  # 61
    ["a minute"],
    [minute(at="2026-11-26T10:29:30Z")],
    [minute(at="2026-11-26T10:29:00")],  # no offset
    [minute(at="yesterday")],
    [minute(at=None)],
    [minute(at="0001-01-01T00:00:00+01:00")],
    [minute(cpu=-1)],
    [minute(cpu=1e9)],
    [minute(cpu="2.5")],
    [minute(cpu=float("nan"))],
    [minute(memory=float("inf"))],
    [minute(players=1.5)],
    [minute(players=True)],
    [{"at": "2026-11-26T10:29:00Z", "cpu_percent": 1.0, "memory_mb": 2.0}],
]


@freeze_time(NOW)
@pytest.mark.parametrize("minutes", BAD_MINUTES)
def test_bad_minutes_are_400_naming_the_field_and_store_nothing(demo_server, node_token, minutes):
    response = heartbeat(node_token, {demo_server.id: {"minutes": minutes}})
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["minutes"]
    assert not ServerMinute.objects.exists()


@freeze_time(NOW)
def test_minutes_in_the_reading_of_something_not_a_server_are_400(agent_node, node_token):
    response = heartbeat(node_token, {"../etc": {"minutes": [minute()]}})
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["minutes"]


# Deleting and purging


@freeze_time(NOW)
def test_deleting_a_server_deletes_its_minutes(acme, agent_node, node_token):
    server = server_create(
        actor=Actor.system("test"), organization=acme, name="Gone", game="demo", node=agent_node
    )
    heartbeat(node_token, {server.id: {"minutes": [minute()]}})
    Server.objects.filter(id=server.id).delete()
    assert not ServerMinute.objects.exists()


def test_the_purge_deletes_minutes_older_than_24_hours_only(demo_server, node_token):
    with freeze_time("2026-11-26 10:30:20") as frozen:
        heartbeat(node_token, {demo_server.id: {"minutes": [minute("2026-11-26T10:29:00Z")]}})
        frozen.tick(timedelta(hours=12))
        heartbeat(node_token, {demo_server.id: {"minutes": [minute("2026-11-26T22:29:00Z")]}})
        frozen.tick(timedelta(hours=12))  # the first is 24 h and 80 s old
        assert server_minutes_purge_expired() == 1
    assert [row[0] for row in stored(demo_server)] == [at("2026-11-26 22:29")]


def test_the_purge_deletes_in_batches_until_nothing_expired_is_left(demo_server):
    old = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)
    ServerMinute.objects.bulk_create(
        ServerMinute(server=demo_server, at=old + timedelta(minutes=m), cpu_percent=1.0,
                     memory_mb=1.0, players_online=0)
        for m in [*range(7), 25 * 60, 25 * 60 + 1]
    )  # fmt: skip
    with freeze_time("2026-11-26 10:00:00"), CaptureQueriesContext(connection) as queries:
        assert server_minutes_purge_expired(batch_rows=3) == 7
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("DELETE")]
    assert len(deletes) == 3
    assert ServerMinute.objects.count() == 2


@pytest.mark.django_db
def test_migrate_schedules_the_minutes_purge_hourly():
    schedule = Schedule.objects.get(name="servers.purge_minutes")
    assert schedule.func == "servers.tasks.purge_minutes"
    assert schedule.schedule_type == Schedule.HOURLY


def test_the_scheduled_purge_task_deletes_expired_minutes(demo_server):
    schedule = Schedule.objects.get(name="servers.purge_minutes")
    old = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)
    ServerMinute.objects.create(server=demo_server, at=old, cpu_percent=1.0, memory_mb=1.0,
                                players_online=0)  # fmt: skip
    with freeze_time("2026-11-26 10:00:00"):
        import_string(schedule.func)()
    assert not ServerMinute.objects.exists()
