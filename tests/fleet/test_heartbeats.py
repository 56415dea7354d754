"""Heartbeats cheap enough for a fleet: a known node's heartbeat is one UPDATE, which also
checks its token, so a token rotated since it was remembered changes nothing; only while a
withdrawal of access waits for the node does it read them."""

import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from freezegun import freeze_time

from gshost.withdrawals import Withdrawal
from servers.agents import withdrawal_push as withdrawal_push_module
from servers.agents.withdrawal_push import WITHDRAWAL_KEPT, withdrawal_push
from servers.fleet.nodes import node_rotate_token
from servers.models import Node, Server

HEARTBEAT = "/internal/nodes/heartbeat"
REPORTS = "/internal/nodes/reports"


def post(path: str, body: dict[str, Any], token: str) -> Any:
    return Client().post(
        path, json.dumps(body), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip


def beat(token: str, servers: dict[str, str] | None = None) -> Any:
    body = {"agent_version": "1.0", "outbox_id": "box-1", "servers": servers or {}}
    return post(HEARTBEAT, body, token)


def test_a_known_nodes_heartbeat_is_one_update(
    agent_node: Node, node_token: str, demo_server: Server
) -> None:
    assert beat(node_token, {demo_server.id: "stopped"}).status_code == 200
    with CaptureQueriesContext(connection) as queries:
        assert beat(node_token, {demo_server.id: "stopped"}).status_code == 200
    assert [query["sql"].split()[0] for query in queries.captured_queries] == ["UPDATE"]


def test_a_heartbeat_reads_the_withdrawals_only_while_one_waits_for_the_node(
    agent_node: Node, node_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(withdrawal_push_module, "_push", lambda node, message: None)  # unreached
    assert beat(node_token).status_code == 200
    withdrawal_push(Withdrawal(reason="key revoked", key_ids=frozenset({"abcd1234"})))
    with CaptureQueriesContext(connection) as queries:
        answer = beat(node_token).json()
    assert [w["key_ids"] for w in answer["withdrawals"]] == [["abcd1234"]]
    assert any("pendingwithdrawal" in q["sql"].lower() for q in queries.captured_queries)
    with freeze_time(timezone.now() + WITHDRAWAL_KEPT + timedelta(seconds=1)):
        assert beat(node_token).json()["withdrawals"] == []  # the node known again
        with CaptureQueriesContext(connection) as queries:
            assert beat(node_token).json()["withdrawals"] == []
    assert [query["sql"].split()[0] for query in queries.captured_queries] == ["UPDATE"]


def test_a_token_rotated_after_it_was_remembered_is_refused_and_writes_nothing(
    agent_node: Node, node_token: str
) -> None:
    assert beat(node_token).status_code == 200
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=None, agent_version="")
    node_rotate_token(node=agent_node)
    assert beat(node_token).status_code == 401
    assert Node.objects.filter(id=agent_node.id, last_heartbeat_at=None).exists()


def test_a_report_with_a_token_rotated_after_it_was_remembered_is_refused(
    agent_node: Node, node_token: str, demo_server: Server
) -> None:
    assert beat(node_token).status_code == 200
    node_rotate_token(node=agent_node)
    report = {"outbox_id": "box-1", "seq": 1, "server_id": demo_server.id, "kind": "ready"}
    assert post(REPORTS, report, node_token).status_code == 401
    assert Node.objects.get(id=agent_node.id).last_report_seq == 0


def test_what_the_node_runs_is_compared_with_ours_when_it_changes(
    agent_node: Node, node_token: str, demo_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="servers.agents.reports")
    for state in ("running", "running", "starting"):
        beat(node_token, {demo_server.id: state})
    said = [r.getMessage() for r in caplog.records if demo_server.id in r.getMessage()]
    assert said == [
        f"Node node-1: {demo_server.id} is running there, stopped here",
        f"Node node-1: {demo_server.id} is starting there, stopped here",
    ]
