"""The control plane's side of the node protocol: its server states and job kinds are the
protocol's, its node routes read bodies as the protocol's messages, answering a body that is
not one with 400 `invalid_request` naming the field (never a 5xx), and a heartbeat's answer
is the protocol's."""

import json

import pytest
from django.test import Client

from gshost_agent import protocol
from gshost_agent.protocol import HeartbeatAnswer
from servers.models import JobKind, ServerState

HEARTBEAT = "/internal/nodes/heartbeat"
REPORTS = "/internal/nodes/reports"
BACKUP_PARTS = "/internal/nodes/backup-parts"
BEAT = {"agent_version": "1", "outbox_id": "obx_1", "servers": {}}
REPORT = {"outbox_id": "obx_1", "seq": 1, "server_id": "srv_0123456789abcdef", "kind": "ready",
          "at": "2026-11-26T10:00:00Z", "pid": 1}  # fmt: skip


def post(path, body, token):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    return Client().post(path, json.dumps(body), content_type="application/json", **headers)


def test_the_servers_states_and_job_kinds_are_the_protocols():
    assert ServerState.values == [state.value for state in protocol.ServerState]
    assert JobKind.values == [kind.value for kind in protocol.JobKind]


def test_a_heartbeat_is_answered_with_the_protocols_answer(agent_node, node_token):
    response = post(HEARTBEAT, BEAT, node_token)
    assert response.status_code == 200
    answer = HeartbeatAnswer.from_json(response.json())
    assert (answer.node, answer.withdrawals) == (agent_node.name, ())
    assert answer.console is not None and answer.console.keys


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (HEARTBEAT, {**BEAT, "servers": {"srv_0123456789abcdef": "exploded"}}, "servers"),
        (HEARTBEAT, {**BEAT, "capacity": {"cpu_percent": True}}, "capacity"),
        (HEARTBEAT, {**BEAT, "readings": {"srv_a": {"minutes": [{"at": 1}]}}}, "minutes"),
        (HEARTBEAT, {**BEAT, "sftp": {"port": "2022", "fingerprint": None}}, "sftp"),
        (HEARTBEAT, {**BEAT, "withdrawals_taken": "7"}, "withdrawals_taken"),
        (REPORTS, {**REPORT, "at": "2026-11-26T10:00:00"}, "at"),
        (REPORTS, {**REPORT, "kind": "job_progress", "job_id": "job_1", "progress": -1},
         "progress"),
        (REPORTS, {**REPORT, "seq": 2**62}, "seq"),
        (BACKUP_PARTS, {"backup_id": "bkp_1", "first": 10_001, "count": 1}, "first"),
        (BACKUP_PARTS, {"backup_id": "srv_1", "first": 1, "count": 1}, "backup_id"),
    ],
)  # fmt: skip
def test_a_body_that_is_not_the_routes_message_is_400_naming_the_field(
    agent_node, node_token, path, body, field
):
    response = post(path, body, node_token)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert list(response.json()["error"]["fields"]) == [field]
