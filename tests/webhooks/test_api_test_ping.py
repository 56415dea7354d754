"""POST /webhooks/{id}/test against a real local HTTPS receiver named like a public host."""

import hashlib
import hmac
import json

import pytest

from tests.conftest import client_for, error_of
from tests.webhooks.delivery_fixtures import (
    HOST,
)
from tests.webhooks.receiver import HttpsReceiver
from tests.webhooks.webhook_fixtures import (
    HOOKS,
    create,
)
from webhooks.models import Delivery

pytestmark = pytest.mark.usefixtures("engine_settings")

RESULT_FIELDS = {"success", "status_code", "duration_ms", "response_body", "error"}


@pytest.fixture
def registered(admin, receiver: HttpsReceiver) -> dict:
    """A webhook of Acme pointing at the receiver; the create response, secret included."""
    response = create(admin, url=f"https://{HOST}:{receiver.port}/hook")
    assert response.status_code == 201, response.content
    return response.json()


def test_it_sends_a_signed_ping_and_reports_success(admin, registered, receiver):
    receiver.set_behaviour(status=200, body=b"pong")
    response = admin.post(f"{HOOKS}/{registered['id']}/test")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == RESULT_FIELDS
    assert (body["success"], body["status_code"], body["response_body"]) == (True, 200, "pong")
    assert body["error"] is None
    assert isinstance(body["duration_ms"], int)
    (request,) = receiver.requests
    timestamp = request.header("X-Webhook-Timestamp") or ""
    expected = hmac.new(
        registered["signing_secret"].encode(),
        timestamp.encode() + b"." + request.body,
        hashlib.sha256,
    ).hexdigest()
    assert request.header("X-Webhook-Signature") == expected
    assert request.header("X-Webhook-Event") is None
    assert request.header("X-Webhook-Delivery") is None
    assert json.loads(request.body)["webhook_id"] == registered["id"]


def test_it_reports_a_failing_receiver(admin, registered, receiver):
    receiver.set_behaviour(status=503, body=b"maintenance")
    body = admin.post(f"{HOOKS}/{registered['id']}/test").json()
    assert (body["success"], body["status_code"], body["response_body"]) == (
        False,
        503,
        "maintenance",
    )


def test_it_reports_a_redirect_as_a_failure(admin, registered, receiver):
    receiver.set_behaviour(redirect_to="https://elsewhere.example.com/")
    body = admin.post(f"{HOOKS}/{registered['id']}/test").json()
    assert (body["success"], body["status_code"], body["error"]) == (False, 302, "redirect")


def test_it_stores_no_delivery_for_a_ping(admin, registered):
    admin.post(f"{HOOKS}/{registered['id']}/test")
    assert not Delivery.objects.exists()


def test_it_needs_webhooks_manage_to_send_a_ping(make_key, registered, receiver):
    response = client_for(make_key(["webhooks:read", "webhooks:write"])).post(
        f"{HOOKS}/{registered['id']}/test"
    )
    assert response.status_code == 403
    assert error_of(response)["required_scope"] == "webhooks:manage"
    assert receiver.requests == []
