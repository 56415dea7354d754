"""End to end: a power action through the API becomes a signed server.started delivery at a
real local HTTPS receiver, carried by a real `qcluster` worker (the simulated runtime's
follow-up task, then the delivery attempt). PostgreSQL and Redis only, like the webhooks
app's own worker tests."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.actors import Actor
from servers.models import Server
from servers.services import server_create
from tests.conftest import API, client_for
from tests.webhooks.delivery_fixtures import (
    Hooks,
    expected_signature,
    wait_for,
)
from tests.webhooks.receiver import HttpsReceiver
from tests.webhooks.worker_cluster import (
    needs_postgres_and_redis,
    purge_queued_tasks,
    start_cluster,
    stop_cluster,
)

pytestmark = [pytest.mark.django_db(transaction=True), needs_postgres_and_redis]


@pytest.fixture
def worker(receiver: HttpsReceiver, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    purge_queued_tasks()
    process = start_cluster(
        receiver, tmp_path / "qcluster.log", SIMULATED_RUNTIME_DELAY_SECONDS="0.5", Q_WORKERS="2"
    )
    yield process
    stop_cluster(process)


def test_a_start_through_the_api_arrives_signed_at_the_receiver(
    acme: Any, make_key: Any, receiver: HttpsReceiver, engine_settings: Any, worker: Any
) -> None:
    hooks = Hooks(acme, receiver)
    webhook = hooks.webhook("/servers")
    server = server_create(actor=Actor.system("test"), organization=acme, name="Survival")
    response = client_for(make_key(["servers:power"])).post(
        f"{API}/servers/{server.id}/power", {"action": "start"}, format="json"
    )
    assert response.status_code == 202

    wait_for(lambda: len(receiver.requests) == 1, timeout=45)
    [request] = receiver.requests
    timestamp = request.header("X-Webhook-Timestamp") or ""
    assert request.header("X-Webhook-Signature") == expected_signature(
        hooks.secrets[webhook.id], timestamp, request.body
    )
    assert request.header("X-Webhook-Event") == "server.started"
    body = json.loads(request.body)
    assert body["server"] == {"id": server.id, "name": "Survival"}
    assert body["data"] == {"previous_state": "starting"}
    assert Server.objects.get(id=server.id).state == "running"
