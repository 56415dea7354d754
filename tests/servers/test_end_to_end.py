"""End to end: a power action through the API becomes a signed server.started delivery at a
real local HTTPS receiver, carried by a real `qcluster` worker (the simulated runtime's
follow-up task, then the delivery attempt). PostgreSQL and Redis only, like the webhooks
app's own worker tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django_q.brokers import get_broker

from servers.models import Server
from servers.services import server_create
from tests.conftest import API, client_for
from tests.webhooks.delivery_fixtures import (
    Hooks,
    engine_settings_fixture,  # noqa: F401
    expected_signature,
    receiver_fixture,  # noqa: F401
    wait_for,
)
from tests.webhooks.receiver import HttpsReceiver

ROOT = Path(__file__).resolve().parents[2]
ON_POSTGRES = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not (ON_POSTGRES and settings.REDIS_URL),
        reason="the end-to-end worker test needs DATABASE_URL on PostgreSQL and REDIS_URL",
    ),
]


def worker_environment(receiver: HttpsReceiver) -> dict[str, str]:
    db = connection.settings_dict
    database_url = (
        f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}"
    )
    return {
        **os.environ,
        "DATABASE_URL": database_url,  # the test database, which this test commits to
        "REDIS_URL": settings.REDIS_URL,
        "SECRET_KEY": settings.SECRET_KEY,
        "WEBHOOK_SECRET_KEYS": ",".join(settings.WEBHOOK_SECRET_KEYS),
        "WEBHOOK_CA_BUNDLE": receiver.ca_pem_path,
        "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
        "SIMULATED_RUNTIME_DELAY_SECONDS": "0.5",
        "Q_WORKERS": "2",
        "LOG_LEVEL": "WARNING",
    }


@pytest.fixture
def worker(receiver: HttpsReceiver, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    get_broker().purge_queue()  # tasks other tests queued for rows that are gone
    log = (tmp_path / "qcluster.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.webhooks.loopback_qcluster"],
        cwd=ROOT,
        env=worker_environment(receiver),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    yield process
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def test_a_start_through_the_api_arrives_signed_at_the_receiver(
    acme: Any, make_key: Any, receiver: HttpsReceiver, engine_settings: Any, worker: Any
) -> None:
    hooks = Hooks(acme, receiver)
    webhook = hooks.webhook("/servers")
    server = server_create(organization=acme, name="Survival")
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
