"""Server events reach the webhooks app as delivery rows written in the same transaction as
the change, one per subscribed webhook of the server's organization."""

import json

import pytest
from django.db import transaction
from django.utils import timezone
from freezegun import freeze_time

from audit.actors import Actor
from servers.lifecycle import Trigger
from servers.models import Server
from servers.runtime import runtime_sweep
from servers.services import server_transition
from tests.conftest import API, client_for
from webhooks.events import EVENT_NAMES
from webhooks.models import Delivery
from webhooks.services import webhook_create

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


@pytest.fixture
def acme_hook(acme):
    webhook, _secret = webhook_create(
        organization=acme,
        url="https://hooks.example.com/acme",
        events=sorted(EVENT_NAMES),
        actor=TEST_ACTOR,
    )
    return webhook


@pytest.fixture
def globex_hook(globex):
    webhook, _secret = webhook_create(
        organization=globex,
        url="https://hooks.example.com/globex",
        events=sorted(EVENT_NAMES),
        actor=TEST_ACTOR,
    )
    return webhook


def bodies(webhook):
    rows = Delivery.objects.filter(webhook=webhook).order_by("created_at", "id")
    return [json.loads(row.body) for row in rows]


def test_a_start_through_the_api_ends_in_one_started_delivery(make_key, acme_server, acme_hook):
    client = client_for(make_key(["servers:power"]))
    with freeze_time("2026-11-22 10:00:00") as frozen:
        client.post(f"{API}/servers/{acme_server.id}/power", {"action": "start"}, format="json")
        assert bodies(acme_hook) == []  # starting fires nothing
        frozen.tick(2)
        runtime_sweep(timezone.now())
    [body] = bodies(acme_hook)
    assert list(body) == ["event", "occurred_at", "server", "data", "delivery_id"]
    assert body["event"] == "server.started"
    assert body["occurred_at"] == "2026-11-22T10:00:02.000Z"
    assert body["server"] == {"id": acme_server.id, "name": "Survival"}
    assert body["data"] == {"previous_state": "starting"}


def test_a_console_command_from_the_api_is_delivered(
    make_key, acme_server, put_in_state, acme_hook
):
    put_in_state(acme_server, "running")
    key = make_key(["console:write"])
    client_for(key).post(
        f"{API}/servers/{acme_server.id}/console", {"command": "say hi"}, format="json"
    )
    assert bodies(acme_hook)[-1]["data"] == {
        "command": "say hi",
        "source": "api",
        "key_id": key.key_id,
        "user": None,
    }


def test_another_organizations_webhook_hears_nothing(
    acme_server, put_in_state, acme_hook, globex_hook
):
    put_in_state(acme_server, "running")
    assert [b["event"] for b in bodies(acme_hook)] == ["server.started"]
    assert bodies(globex_hook) == []


def test_no_delivery_survives_a_change_that_rolled_back(acme_server, put_in_state, acme_hook):
    put_in_state(acme_server, "starting")
    with pytest.raises(RuntimeError), transaction.atomic():
        server_transition(server_id=acme_server.id, trigger=Trigger.READY, cause="test")
        raise RuntimeError("the surrounding work failed")
    assert bodies(acme_hook) == []
    assert Server.objects.get(id=acme_server.id).state == "starting"
