"""The webhook routes: create, list, retrieve, update, delete; their errors and scopes."""

import logging
import re
from datetime import timedelta

import pytest
from django.utils import timezone
from freezegun import freeze_time

from audit.models import AuditRecord
from gshost.ids import format_timestamp
from tests.conftest import client_for, error_of
from tests.webhooks.webhook_fixtures import (
    HOOKS,
    URL,
    create,
    make_delivery,
)
from webhooks.models import Delivery, DeliveryAttempt, Webhook

RECORD_FIELDS = {"id", "url", "events", "description", "status", "created_at", "updated_at"}
SECRET = re.compile(r"whsec_[0-9A-Za-z]{43}")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


# Create


def test_it_creates_a_webhook_and_answers_201_with_its_signing_secret(admin):
    response = create(admin, description="crash pager")
    assert response.status_code == 201
    body = response.json()
    assert set(body) == RECORD_FIELDS | {"signing_secret"}
    assert re.fullmatch(r"whk_[0-9A-Za-z]{16,}", body["id"])
    assert SECRET.fullmatch(body["signing_secret"])
    assert (body["url"], body["events"], body["status"]) == (URL, ["server.started"], "active")
    assert body["description"] == "crash pager"
    assert TIMESTAMP.fullmatch(body["created_at"]) and TIMESTAMP.fullmatch(body["updated_at"])


def test_it_ignores_a_member_the_schema_does_not_name_as_the_schema_allows(admin):
    response = create(admin, colour="blue", event_types=["server.stopped"], nested={"a": [1]})
    assert response.status_code == 201
    assert set(response.json()) == RECORD_FIELDS | {"signing_secret"}
    assert response.json()["events"] == ["server.started"]


def test_it_stores_the_url_exactly_as_given(admin):
    url = "HTTPS://Hooks.Example.com:443/a%20b?x=1"
    assert create(admin, url=url).json()["url"] == url
    assert Webhook.objects.get().url == url


def test_it_removes_duplicate_events_keeping_their_order(admin):
    events = ["server.stopped", "server.started", "server.stopped"]
    assert create(admin, events=events).json()["events"] == ["server.stopped", "server.started"]


def test_it_defaults_the_description_to_empty(admin):
    assert create(admin).json()["description"] == ""


def test_it_refuses_a_missing_url_with_invalid_request(admin):
    response = admin.post(HOOKS, {"events": ["server.started"]}, format="json")
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_request"
    assert "url" in error["fields"]


def test_it_refuses_a_url_that_is_not_a_string(admin):
    response = create(admin, url=["https://hooks.example.com/"])
    assert response.status_code == 400
    assert set(error_of(response)["fields"]) == {"url"}


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://hooks.example.com/x", "https_required"),
        ("hooks.example.com/x", "malformed_url"),
        ("https://user@hooks.example.com/x", "malformed_url"),
        ("", "malformed_url"),
        ("https:///x", "empty_host"),
        ("https://localhost/x", "private_address"),
        ("https://10.0.0.1/x", "private_address"),
        ("https://2130706433/x", "private_address"),
        ("https://169.254.169.254/latest/meta-data", "private_address"),
    ],
)
def test_it_refuses_an_unsafe_url_naming_the_rule(admin, url, reason):
    response = create(admin, url=url)
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["reason"], error["field"]) == (
        "invalid_webhook_url",
        reason,
        "url",
    )
    assert not Webhook.objects.exists()


def test_it_refuses_unknown_events_naming_them(admin):
    response = create(admin, events=["server.started", "player.joined", "backup.done"])
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "unknown_event"
    assert error["fields"] == {"events": ["player.joined", "backup.done"]}


@pytest.mark.parametrize(
    "events", [[], None, "server.started", [7], {"server.started": True}], ids=repr
)
def test_it_refuses_events_that_are_not_a_non_empty_list_of_names(admin, events):
    response = create(admin, events=events)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_request"
    assert set(error["fields"]) == {"events"}


def test_it_refuses_missing_events(admin):
    response = admin.post(HOOKS, {"url": URL}, format="json")
    assert response.status_code == 400
    assert set(error_of(response)["fields"]) == {"events"}


def test_it_refuses_a_body_that_is_not_a_json_object(admin):
    response = admin.post(HOOKS, '["x"]', content_type="application/json")
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"


# Read


def test_it_lists_the_organizations_webhooks_newest_first(admin, outsider):
    with freeze_time(timezone.now() + timedelta(minutes=1)):
        older = create(admin).json()["id"]
    with freeze_time(timezone.now() + timedelta(minutes=2)):
        newer = create(admin).json()["id"]
    create(outsider)
    response = admin.get(HOOKS)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"results", "next", "previous"}
    assert [row["id"] for row in body["results"]] == [newer, older]
    assert all(set(row) == RECORD_FIELDS for row in body["results"])


def test_it_retrieves_one_webhook_without_its_secret(admin, webhook):
    response = admin.get(f"{HOOKS}/{webhook.id}")
    assert response.status_code == 200
    assert set(response.json()) == RECORD_FIELDS
    assert response.json()["events"] == ["server.started", "server.crashed"]


def test_it_never_shows_the_secret_after_creation(admin):
    created = create(admin).json()
    secret = created["signing_secret"]
    for path in [HOOKS, f"{HOOKS}/{created['id']}"]:
        assert secret not in admin.get(path).content.decode()
    patched = admin.patch(f"{HOOKS}/{created['id']}", {"description": "x"}, format="json")
    assert secret not in patched.content.decode()


def test_it_keeps_the_secret_out_of_logs_and_audit_rows(admin, caplog):
    caplog.set_level(logging.DEBUG)
    secret = create(admin).json()["signing_secret"]
    assert secret not in caplog.text
    for row in AuditRecord.objects.values():
        assert secret not in str(row)


def test_it_answers_404_not_found_for_an_unknown_webhook(admin):
    response = admin.get(f"{HOOKS}/whk_00000000000000000000")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


# Update


def test_it_updates_the_events(admin, webhook):
    later = timezone.now() + timedelta(hours=1)
    with freeze_time(later):
        response = admin.patch(
            f"{HOOKS}/{webhook.id}", {"events": ["server.migrated"]}, format="json"
        )
    assert response.status_code == 200
    assert response.json()["events"] == ["server.migrated"]
    assert response.json()["updated_at"] == format_timestamp(later)
    assert Webhook.objects.get().events == ["server.migrated"]


def test_it_accepts_the_event_types_alias_alone(admin, webhook):
    response = admin.patch(
        f"{HOOKS}/{webhook.id}", {"event_types": ["server.stopped"]}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["events"] == ["server.stopped"]


def test_it_refuses_events_and_the_alias_together(admin, webhook):
    body = {"events": ["server.stopped"], "event_types": ["server.stopped"]}
    response = admin.patch(f"{HOOKS}/{webhook.id}", body, format="json")
    assert response.status_code == 422
    assert error_of(response)["code"] == "conflicting_fields"
    assert Webhook.objects.get().events == webhook.events


def test_it_refuses_unknown_events_on_update(admin, webhook):
    response = admin.patch(f"{HOOKS}/{webhook.id}", {"events": ["server.exploded"]}, format="json")
    assert response.status_code == 422
    assert error_of(response)["fields"] == {"events": ["server.exploded"]}


def test_it_refuses_empty_events_on_update(admin, webhook):
    response = admin.patch(f"{HOOKS}/{webhook.id}", {"event_types": []}, format="json")
    assert response.status_code == 400
    assert set(error_of(response)["fields"]) == {"events"}


def test_it_checks_a_new_url_again(admin, webhook):
    response = admin.patch(f"{HOOKS}/{webhook.id}", {"url": "https://127.0.0.1/"}, format="json")
    assert response.status_code == 422
    assert error_of(response)["reason"] == "private_address"
    assert Webhook.objects.get().url == URL


def test_it_updates_the_url_and_description(admin, webhook):
    body = {"url": "https://other.example.net/in", "description": "moved"}
    response = admin.patch(f"{HOOKS}/{webhook.id}", body, format="json")
    assert response.status_code == 200
    assert (response.json()["url"], response.json()["description"]) == (body["url"], "moved")


def test_it_refuses_put(admin, webhook):
    response = admin.put(f"{HOOKS}/{webhook.id}", {"events": ["server.stopped"]}, format="json")
    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"


# Delete


def test_it_deletes_the_webhook_with_its_history(admin, webhook):
    delivery = make_delivery(webhook)
    DeliveryAttempt.objects.create(
        delivery=delivery, number=1, trigger="automatic", started_at=delivery.created_at
    )
    response = admin.delete(f"{HOOKS}/{webhook.id}")
    assert response.status_code == 204
    assert not Webhook.objects.exists()
    assert not Delivery.objects.exists() and not DeliveryAttempt.objects.exists()
    assert admin.get(f"{HOOKS}/{webhook.id}").status_code == 404


# Scopes


@pytest.mark.parametrize(
    ("scopes", "method", "path", "required"),
    [
        (["webhooks:read"], "post", "", "webhooks:write"),
        (["webhooks:read"], "delete", "/{id}", "webhooks:write"),
        (["webhooks:write"], "patch", "/{id}", "webhooks:manage"),
        (["webhooks:write"], "post", "/{id}/test", "webhooks:manage"),
        (["webhooks:write"], "post", "/{id}/deliveries/redeliver", "webhooks:manage"),
        (["webhooks:write"], "post", "/{id}/deliveries/{dlv}/redeliver", "webhooks:manage"),
        (["webhooks:write"], "get", "", "webhooks:read"),
        (["webhooks:manage"], "get", "/{id}/deliveries", "webhooks:read"),
        (["webhooks:manage"], "get", "/{id}/deliveries/{dlv}", "webhooks:read"),
    ],
)
def test_it_requires_the_scope_of_each_route(make_key, webhook, scopes, method, path, required):
    delivery = make_delivery(webhook)
    url = HOOKS + path.format(id=webhook.id, dlv=delivery.id)
    response = getattr(client_for(make_key(scopes)), method)(url, {}, format="json")
    assert response.status_code == 403
    error = error_of(response)
    assert (error["code"], error["required_scope"]) == ("insufficient_scope", required)


def test_it_lets_webhooks_write_create_and_delete(make_key):
    client = client_for(make_key(["webhooks:write"]))
    created = create(client)
    assert created.status_code == 201
    assert client.delete(f"{HOOKS}/{created.json()['id']}").status_code == 204


def test_it_lets_webhooks_manage_update(make_key, webhook):
    client = client_for(make_key(["webhooks:manage"]))
    response = client.patch(f"{HOOKS}/{webhook.id}", {"description": "x"}, format="json")
    assert response.status_code == 200


# Other organizations


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/{id}"),
        ("patch", "/{id}"),
        ("delete", "/{id}"),
        ("post", "/{id}/test"),
        ("get", "/{id}/deliveries"),
        ("post", "/{id}/deliveries/redeliver"),
        ("get", "/{id}/deliveries/{dlv}"),
        ("post", "/{id}/deliveries/{dlv}/redeliver"),
    ],
)
def test_it_hides_another_organizations_webhook_like_a_missing_one(outsider, webhook, method, path):
    delivery = make_delivery(webhook)
    call = getattr(outsider, method)
    foreign = call(HOOKS + path.format(id=webhook.id, dlv=delivery.id), {}, format="json")
    missing = call(HOOKS + path.format(id="whk_00000000000000000000", dlv=delivery.id), {})
    assert foreign.status_code == missing.status_code == 404
    assert error_of(foreign) == error_of(missing)
    assert error_of(foreign)["code"] == "not_found"
    assert Webhook.objects.get().pk == webhook.pk
    assert Delivery.objects.get().redelivery_requested_at is None


def test_it_lists_nothing_of_another_organization(outsider, webhook):
    assert outsider.get(HOOKS).json()["results"] == []


def test_it_records_api_calls_under_the_route_name(admin, admin_key, webhook):
    admin.get(f"{HOOKS}/{webhook.id}")
    record = AuditRecord.objects.get(actor_key_id=admin_key.key_id)
    assert (record.action, record.status_code) == ("webhooks.detail", 200)
