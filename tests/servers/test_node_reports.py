"""The routes agents call: POST /internal/nodes/heartbeat and /internal/nodes/reports."""

import json

import pytest
from django.test import Client
from freezegun import freeze_time
from jsonschema import Draft202012Validator

from audit.actors import Actor
from audit.models import AuditRecord
from servers.fleet.nodes import simulated_node
from servers.models import Node, NodeState, Server, ServerTransition
from servers.services import server_create
from tests.servers.conftest import Published, events_of
from tests.servers.node_fixtures import register
from webhooks.events import EVENT_NAMES
from webhooks.models import Delivery
from webhooks.services import webhook_create

HEARTBEAT = "/internal/nodes/heartbeat"
REPORTS = "/internal/nodes/reports"


def post(path, body, token=None, raw=None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    data = raw if raw is not None else json.dumps(body)
    return Client().post(path, data, content_type="application/json", **headers)


def report(server, kind, seq=1, outbox_id="box-1", **fields):
    return {
        "outbox_id": outbox_id,
        "seq": seq,
        "server_id": server.id,
        "kind": kind,
        "at": "2026-11-26T10:00:00.000Z",
        "pid": 4242,
        "exit_code": None,
        "signal": None,
        "oom": False,
        "last_output": [],
        **fields,
    }


def state_of(server):
    return Server.objects.get(id=server.id).state


# Who may call


@pytest.mark.parametrize("path", [HEARTBEAT, REPORTS])
def test_it_refuses_a_call_without_a_token_with_401(db, path):
    response = post(path, {})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_token"
    assert response["WWW-Authenticate"] == 'Bearer error="invalid_token"'


@pytest.mark.parametrize("path", [HEARTBEAT, REPORTS])
def test_it_refuses_a_wrong_token_with_401(agent_node, path):
    assert post(path, {}, token="gsn_" + "x" * 43).status_code == 401


def test_a_heartbeat_with_a_wrong_token_changes_nothing(agent_node):
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=None)
    post(HEARTBEAT, {"agent_version": "1", "outbox_id": "b", "servers": {}}, "gsn_" + "x" * 43)
    assert Node.objects.get(id=agent_node.id).last_heartbeat_at is None


def test_it_refuses_get_with_405(agent_node, node_token):
    response = Client().get(HEARTBEAT, HTTP_AUTHORIZATION=f"Bearer {node_token}")
    assert response.status_code == 405


# Heartbeats


def test_a_heartbeat_makes_the_node_online_for_30_seconds(agent_node, node_token):
    body = {"agent_version": "0.3.0", "outbox_id": "box-1", "servers": {}}
    with freeze_time("2026-11-26 10:00:00"):
        response = post(HEARTBEAT, body, node_token)
    assert response.status_code == 200
    assert response.json()["node"] == "node-1"
    node = Node.objects.get(id=agent_node.id)
    assert node.agent_version == "0.3.0"
    with freeze_time("2026-11-26 10:00:29"):
        assert node.state() == NodeState.ONLINE
    with freeze_time("2026-11-26 10:00:31"):
        assert node.state() == NodeState.UNREACHABLE


def test_a_heartbeat_keeps_the_nodes_isolation(agent_node, node_token):
    said = "sandboxed: namespaces (pid, ipc, mount, net), cgroups, own uid/gid"
    body = {"agent_version": "0.3.0", "outbox_id": "b", "servers": {}, "isolation": said}
    assert post(HEARTBEAT, body, node_token).status_code == 200
    assert Node.objects.get(id=agent_node.id).isolation == said
    del body["isolation"]  # an agent of before: what was said stays
    assert post(HEARTBEAT, body, node_token).status_code == 200
    assert Node.objects.get(id=agent_node.id).isolation == said


def test_a_heartbeat_keeps_its_templates_capabilities_known_ones_only(agent_node, node_token):
    said = {"mygame": ["power", "players", "teleport"], "demo": ["console"]}
    body = {"agent_version": "1", "outbox_id": "b", "servers": {}, "game_capabilities": said}
    assert post(HEARTBEAT, body, node_token).status_code == 200
    kept = Node.objects.get(id=agent_node.id).game_capabilities
    assert kept == {"demo": ["console"], "mygame": ["players", "power"]}


@pytest.mark.parametrize(
    "body",
    [
        {"agent_version": "1", "outbox_id": "b", "servers": {}, "isolation": "x" * 101},
        {"agent_version": "1", "outbox_id": "b", "servers": {}, "isolation": "a\nb"},
        {"agent_version": 3, "outbox_id": "b", "servers": {}},
        {"agent_version": "1", "outbox_id": "b", "servers": []},
        {"agent_version": "1", "outbox_id": "b", "servers": {"srv_x": "exploded"}},
        {"agent_version": "1", "outbox_id": "b", "servers": {"nope": "running"}},
        {"agent_version": "1", "outbox_id": "", "servers": {}},
        {"agent_version": "1", "outbox_id": "b", "servers": {}, "game_capabilities": ["x"]},
        {"agent_version": "1", "outbox_id": "b", "servers": {}, "game_capabilities": {"A": []}},
        {"agent_version": "1", "outbox_id": "b", "servers": {}, "game_capabilities": {"a": "x"}},
        {"agent_version": "1", "outbox_id": "b", "servers": {}, "game_capabilities": {"a": [1]}},
    ],
)
def test_a_bad_heartbeat_is_400(agent_node, node_token, body):
    assert post(HEARTBEAT, body, node_token).status_code == 400


# Reports: each kind and the move it makes


def test_ready_of_a_starting_server_makes_it_running_with_started(
    demo_server, node_token, put_in_state, published
):
    put_in_state(demo_server, "starting")
    response = post(REPORTS, report(demo_server, "ready"), node_token)
    assert response.status_code == 200
    assert response.json() == {"acknowledged": 1}
    assert state_of(demo_server) == "running"
    assert published[-1] == Published(
        "server.started", demo_server.id, {"previous_state": "starting"}
    )


def test_ready_marks_the_settings_applied(demo_server, node_token, put_in_state):
    put_in_state(demo_server, "starting")
    post(REPORTS, report(demo_server, "ready"), node_token)
    assert Server.objects.get(id=demo_server.id).reported_settings["max-players"] == "20"


def test_ready_of_a_restarting_server_fires_restarted(
    demo_server, node_token, put_in_state, published
):
    put_in_state(demo_server, "restarting")
    published.clear()
    post(REPORTS, report(demo_server, "ready"), node_token)
    assert events_of(published) == ["server.restarted"]


def test_halted_of_a_stopping_server_fires_stopped(
    demo_server, node_token, put_in_state, published
):
    put_in_state(demo_server, "stopping")
    published.clear()
    post(REPORTS, report(demo_server, "halted", exit_code=0), node_token)
    assert state_of(demo_server) == "stopped"
    assert published == [
        Published("server.stopped", demo_server.id, {"previous_state": "stopping"})
    ]


def test_crashed_fires_crashed_with_the_nodes_details(
    demo_server, node_token, put_in_state, published
):
    put_in_state(demo_server, "running")
    published.clear()
    lines = [f"line {n}" for n in range(15)] + ["x" * 300]
    body = report(demo_server, "crashed", exit_code=None, signal=9, oom=True, last_output=lines)
    post(REPORTS, body, node_token)
    assert state_of(demo_server) == "stopped"
    assert published == [
        Published(
            "server.crashed",
            demo_server.id,
            {
                "reason": "exited",
                "exit_code": None,
                "signal": 9,
                "oom": True,
                "last_output": [*lines[6:15], "x" * 200],
                "will_restart": False,  # within 60 s of its start: a crash loop
            },
        )
    ]


def test_a_crash_report_is_delivered_in_the_shape_the_schema_publishes(
    acme, demo_server, node_token, put_in_state
):
    webhook_create(
        organization=acme,
        url="https://hooks.example.com/acme",
        events=sorted(EVENT_NAMES),
        actor=Actor.system("tests"),
    )
    put_in_state(demo_server, "running")
    body = report(demo_server, "crashed", exit_code=137, signal=9, last_output=["bye"])
    post(REPORTS, body, node_token)
    delivery = Delivery.objects.get(event="server.crashed")
    payload = json.loads(delivery.body)
    assert payload["data"] == {
        "reason": "exited", "exit_code": 137, "signal": 9, "oom": False, "last_output": ["bye"],
        "will_restart": False,
    }  # fmt: skip
    document = Client().get("/api/public/v1/schema/?format=json").json()
    schema = document["components"]["schemas"]["WebhookEvent_server_crashed"]
    Draft202012Validator(schema).validate(payload)


def test_failed_to_start_fires_crashed_with_that_reason(
    demo_server, node_token, put_in_state, published
):
    put_in_state(demo_server, "starting")
    post(REPORTS, report(demo_server, "failed_to_start", exit_code=2), node_token)
    assert state_of(demo_server) == "stopped"
    assert published[-1].data == {
        "reason": "failed_to_start",
        "exit_code": 2,
        "signal": None,
        "oom": False,
        "last_output": [],
        "will_restart": False,
    }


@pytest.mark.parametrize("state", ["running", "starting", "restarting", "stopping"])
def test_stopped_by_node_stops_the_server_with_stopped(
    demo_server, node_token, put_in_state, published, state
):
    put_in_state(demo_server, state)
    published.clear()
    post(REPORTS, report(demo_server, "stopped_by_node", exit_code=0), node_token)
    assert state_of(demo_server) == "stopped"
    assert published == [
        Published("server.stopped", demo_server.id, {"previous_state": "stopping"})
    ]
    last = ServerTransition.objects.filter(server=demo_server).order_by("-at", "-id").first()
    assert last.cause == "node node-1: stopped_by_node"


def test_started_by_node_makes_a_stopped_server_starting_without_an_event(
    demo_server, node_token, published
):
    post(REPORTS, report(demo_server, "started_by_node", pid=None), node_token)
    assert state_of(demo_server) == "starting"
    assert published == []
    last = ServerTransition.objects.filter(server=demo_server).order_by("-at", "-id").first()
    assert (last.trigger, last.cause) == ("node_start", "node node-1: started_by_node")


def test_halted_of_a_running_server_stops_it_with_stopped(
    demo_server, node_token, put_in_state, published
):
    """A stop the node carried out but answered too late for: the server was left running."""
    put_in_state(demo_server, "running")
    published.clear()
    post(REPORTS, report(demo_server, "halted", exit_code=0), node_token)
    assert state_of(demo_server) == "stopped"
    assert published == [
        Published("server.stopped", demo_server.id, {"previous_state": "stopping"})
    ]


def test_ready_of_a_stopped_server_runs_it_with_started(demo_server, node_token, published):
    """A start the node carried out but answered too late for: it was a failed start."""
    post(REPORTS, report(demo_server, "ready"), node_token)
    assert state_of(demo_server) == "running"
    assert events_of(published) == ["server.started"]
    moves = ServerTransition.objects.filter(server=demo_server).order_by("at", "id")
    assert [move.trigger for move in moves][-2:] == ["node_start", "ready"]


def test_a_report_whose_move_does_not_apply_is_acknowledged_and_ignored(
    demo_server, node_token, published
):
    response = post(REPORTS, report(demo_server, "crashed"), node_token)  # it is stopped
    assert response.status_code == 200
    assert response.json() == {"acknowledged": 1}
    assert state_of(demo_server) == "stopped"
    assert published == []
    assert Node.objects.get(name="node-1").last_report_seq == 1


# Exactly once, in order


def test_a_repeated_report_is_acknowledged_and_applied_once(
    demo_server, node_token, put_in_state, published
):
    put_in_state(demo_server, "running")
    published.clear()
    first = post(REPORTS, report(demo_server, "crashed", seq=7), node_token)
    put_in_state(demo_server, "running")
    again = post(REPORTS, report(demo_server, "crashed", seq=7), node_token)
    assert first.json() == again.json() == {"acknowledged": 7}
    assert state_of(demo_server) == "running"
    assert events_of(published) == ["server.crashed", "server.started"]


def test_a_report_older_than_the_last_applied_is_ignored(demo_server, node_token, put_in_state):
    put_in_state(demo_server, "running")
    post(REPORTS, report(demo_server, "crashed", seq=5), node_token)
    put_in_state(demo_server, "running")
    response = post(REPORTS, report(demo_server, "crashed", seq=4), node_token)
    assert response.json() == {"acknowledged": 4}
    assert state_of(demo_server) == "running"


def test_a_new_outbox_starts_its_sequence_afresh(demo_server, node_token, put_in_state):
    put_in_state(demo_server, "running")
    post(REPORTS, report(demo_server, "crashed", seq=50, outbox_id="box-1"), node_token)
    put_in_state(demo_server, "running")
    post(REPORTS, report(demo_server, "crashed", seq=1, outbox_id="box-2"), node_token)
    assert state_of(demo_server) == "stopped"
    node = Node.objects.get(name="node-1")
    assert (node.outbox_id, node.last_report_seq) == ("box-2", 1)


def test_reports_in_order_each_apply(demo_server, node_token, put_in_state, published):
    put_in_state(demo_server, "starting")
    published.clear()
    post(REPORTS, report(demo_server, "ready", seq=1), node_token)
    post(REPORTS, report(demo_server, "crashed", seq=2), node_token)
    assert events_of(published) == ["server.started", "server.crashed"]


# Another node's servers


def test_a_report_of_another_nodes_server_is_403_and_changes_nothing(
    acme, agent_node, node_token, put_in_state, published
):
    other_node, _ = register("node-2")
    theirs = server_create(
        actor=Actor.system("test"), organization=acme, name="Theirs", game="demo", node=other_node
    )
    put_in_state(theirs, "running")
    published.clear()
    response = post(REPORTS, report(theirs, "crashed", seq=3), node_token)
    assert response.status_code == 403
    assert state_of(theirs) == "running"
    assert published == []
    assert Node.objects.get(id=agent_node.id).last_report_seq == 0


def test_a_report_of_a_simulated_server_is_403(acme_server, node_token, put_in_state):
    assert acme_server.node == simulated_node()
    put_in_state(acme_server, "running")
    assert post(REPORTS, report(acme_server, "crashed"), node_token).status_code == 403
    assert state_of(acme_server) == "running"


# Strict input


@pytest.mark.parametrize(
    "change",
    [
        {"seq": 0},
        {"seq": "1"},
        {"seq": True},
        {"kind": "exploded"},
        {"kind": None},
        {"server_id": "not-a-server"},
        {"outbox_id": 12},
        {"at": "yesterday"},
        {"at": "2026-11-26T10:00:00"},
        {"exit_code": "1"},
        {"signal": 9.5},
        {"oom": "no"},
        {"last_output": "boom"},
        {"last_output": [1, 2]},
    ],
)
def test_a_bad_report_is_400_and_changes_nothing(demo_server, node_token, put_in_state, change):
    put_in_state(demo_server, "running")
    body = {**report(demo_server, "crashed"), **change}
    response = post(REPORTS, body, node_token)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert state_of(demo_server) == "running"


@pytest.mark.parametrize("raw", ["not json", "[1, 2]", '"text"', "\xff"])
def test_a_body_that_is_not_a_json_object_is_400(agent_node, node_token, raw):
    assert post(REPORTS, None, node_token, raw=raw).status_code == 400


def test_a_body_over_64_kib_is_413(demo_server, node_token):
    body = report(demo_server, "crashed", last_output=["x" * 1000] * 70)
    assert post(REPORTS, body, node_token).status_code == 413


def test_the_internal_routes_are_not_audited_as_customer_calls(
    demo_server, node_token, put_in_state
):
    put_in_state(demo_server, "starting")
    post(REPORTS, report(demo_server, "ready"), node_token)
    assert not AuditRecord.objects.filter(path__startswith="/internal/").exists()


def test_control_characters_in_the_last_output_are_dropped(
    demo_server, node_token, put_in_state, published
):
    put_in_state(demo_server, "running")
    lines = ["nul\x00here", "bell\x07", "tab\tkept", "lone \ud800 surrogate"]
    response = post(REPORTS, report(demo_server, "crashed", last_output=lines), node_token)
    assert response.status_code == 200
    assert published[-1].data["last_output"] == [
        "nulhere", "bell", "tab\tkept", "lone ? surrogate"
    ]  # fmt: skip


def test_failed_node_authentications_are_limited_per_address(db, settings, one_rate_window):
    settings.AUTH_FAILURE_RATE = "3/m"
    statuses = [post(REPORTS, {}, token="gsn_" + "x" * 43).status_code for _ in range(4)]
    assert statuses == [401, 401, 401, 429]


@pytest.mark.parametrize("missing", ["agent_version", "servers"])
def test_a_heartbeat_without_a_required_member_is_400(agent_node, node_token, missing):
    body = {"agent_version": "1", "outbox_id": "b", "servers": {}}
    del body[missing]
    assert post(HEARTBEAT, body, node_token).status_code == 400


def test_a_crash_for_the_disk_limit_fires_crashed_with_that_reason(
    demo_server, node_token, put_in_state, published
):
    put_in_state(demo_server, "running")
    post(REPORTS, report(demo_server, "crashed", signal=15, reason="disk_limit"), node_token)
    assert published[-1].data["reason"] == "disk_limit"


# Changes made over SFTP


def sftp_change(server, person, change, paths, seq=1):
    return {
        "outbox_id": "box-1",
        "seq": seq,
        "server_id": server.id,
        "kind": "files_changed",
        "at": "2026-11-26T10:00:00.000Z",
        "person_id": str(person.user_id),
        "change": change,
        "paths": paths,
    }


def test_a_change_made_over_sftp_is_audited_with_source_sftp(demo_server, node_token, alice):
    body = sftp_change(demo_server, alice, "files.rename", ["/a.txt", "/b.txt"])
    assert post(REPORTS, body, node_token).json() == {"acknowledged": 1}
    row = AuditRecord.objects.get(action="files.rename")
    assert (row.source, row.actor_email, row.server_id) == (
        "sftp",
        "alice@acme.test",
        demo_server.id,
    )
    assert json.loads(row.details) == {"from": "/a.txt", "to": "/b.txt"}


def test_a_change_reported_twice_is_audited_once(demo_server, node_token, alice):
    body = sftp_change(demo_server, alice, "files.write", ["/server.properties"], seq=3)
    post(REPORTS, body, node_token)
    post(REPORTS, body, node_token)
    assert AuditRecord.objects.filter(action="files.write", source="sftp").count() == 1


def test_a_change_of_an_unknown_kind_is_refused(demo_server, node_token, alice):
    body = sftp_change(demo_server, alice, "files.chmod", ["/a.txt"])
    assert post(REPORTS, body, node_token).status_code == 400
    assert not AuditRecord.objects.filter(source="sftp").exists()
