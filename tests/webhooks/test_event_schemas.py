"""The OpenAPI 3.1 `webhooks` section: real deliveries made by the engine to the local HTTPS
receiver validate against the JSON Schemas the served schema publishes, and nothing looser."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from jsonschema import Draft202012Validator

from tests.webhooks.delivery_fixtures import Hooks, deliver_due_now
from tests.webhooks.receiver import HttpsReceiver
from webhooks.api.openapi import schema_name
from webhooks.events import Event
from webhooks.services import publish_event
from webhooks.targets.signed import send_ping

SCHEMA_URL = "/api/public/v1/schema/?format=json"
SERVER_ID = "srv_0123456789abcdefABCD"
DATA: dict[Event, dict[str, Any]] = {
    Event.SERVER_STARTED: {"previous_state": "starting"},
    Event.SERVER_STOPPED: {"previous_state": "stopping"},
    Event.SERVER_RESTARTED: {},
    Event.SERVER_CRASHED: {"reason": "exited", "exit_code": 137, "will_restart": True},
    Event.CONSOLE_COMMAND_SENT: {
        "command": "say hi",
        "source": "api",
        "key_id": "AbCd1234",
        "user": None,
    },
    Event.COMMAND_SCHEDULE_EXECUTED: {
        "schedule_id": "sch_0123456789abcdefABCD",
        "schedule_name": "Nightly save",
        "run_id": "run_0123456789abcdefABCD",
        "trigger": "run_now",
        "status": "succeeded",
    },
    Event.COMMAND_SCHEDULE_ALERT: {
        "schedule_id": "sch_0123456789abcdefABCD",
        "schedule_name": "Nightly save",
        "reason": "missed_runs",
        "run_id": None,
        "status": None,
        "missed_runs": 3,
    },
    Event.SERVER_MIGRATED: {
        "previous_address": "203.0.113.10:25565",
        "new_address": "203.0.113.20:25566",
        "port_changed": True,
    },
    Event.SERVER_SUSPENDED: {},
    Event.SERVER_UNSUSPENDED: {},
}


@pytest.fixture(name="document")
def document_fixture(db: None) -> dict[str, Any]:
    response = Client().get(SCHEMA_URL)
    assert response.status_code == 200
    return response.json()


def validator(document: dict[str, Any], name: str) -> Draft202012Validator:
    return Draft202012Validator(document["components"]["schemas"][name])


def delivered_body(hooks: Hooks, receiver: HttpsReceiver, event: Event) -> dict[str, Any]:
    hooks.webhook()
    with transaction.atomic():
        publish_event(
            organization_id=hooks.organization.id,
            server_id=SERVER_ID,
            server_name="Überleben",
            event=event,
            data=DATA[event],
        )
    assert deliver_due_now() == 1
    (request,) = receiver.requests
    return json.loads(request.body)


def test_it_is_an_openapi_31_document_with_a_webhook_per_event_and_the_ping(document):
    assert document["openapi"].startswith("3.1")
    assert set(document["webhooks"]) == {event.value for event in Event} | {"ping"}


@pytest.mark.parametrize("event", list(Event))
def test_it_describes_each_real_delivery_exactly(document, hooks, receiver, event):
    body = delivered_body(hooks, receiver, event)
    validator(document, schema_name(event)).validate(body)


@pytest.mark.parametrize("event", list(Event))
def test_it_points_each_webhook_at_its_event_schema(document, event):
    operation = document["webhooks"][event.value]["post"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": f"#/components/schemas/{schema_name(event)}"}


def test_it_describes_the_real_test_ping(document, hooks, receiver):
    send_ping(hooks.webhook())
    (request,) = receiver.requests
    validator(document, "WebhookTestPing").validate(json.loads(request.body))


def test_it_refuses_a_body_with_an_extra_member(document, hooks, receiver):
    body = delivered_body(hooks, receiver, Event.SERVER_CRASHED)
    body["data"]["core_dumped"] = True
    assert not validator(document, schema_name(Event.SERVER_CRASHED)).is_valid(body)


def test_it_allows_the_crash_details_of_agent_nodes(document, hooks, receiver):
    body = delivered_body(hooks, receiver, Event.SERVER_CRASHED)
    body["data"].update(signal=9, oom=False, last_output=["ready on port 27000"])
    validator(document, schema_name(Event.SERVER_CRASHED)).validate(body)


def test_it_refuses_a_body_missing_a_member(document, hooks, receiver):
    body = delivered_body(hooks, receiver, Event.SERVER_STARTED)
    del body["delivery_id"]
    assert not validator(document, schema_name(Event.SERVER_STARTED)).is_valid(body)


def test_it_refuses_another_events_data(document, hooks, receiver):
    body = delivered_body(hooks, receiver, Event.SERVER_STOPPED)
    assert not validator(document, schema_name(Event.SERVER_STARTED)).is_valid(body)
