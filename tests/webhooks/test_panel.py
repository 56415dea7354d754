"""The panel's webhook pages: list, create (secret shown once), edit, delete, test, history,
redelivery; only the person's organization, with the scopes they hold, audited, CSRF-checked."""

import re

import pytest
from django.test import Client

from audit.actors import Actor
from audit.models import AuditRecord, Source
from audit.services import PanelAction
from tests.webhooks.delivery_fixtures import (
    HOST,
)
from tests.webhooks.webhook_fixtures import (
    URL,
    add_attempt,
    make_delivery,
)
from webhooks.events import Event
from webhooks.models import Delivery, DeliveryStatus, Webhook
from webhooks.secrets import decrypt_secret
from webhooks.services import webhook_create

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


PANEL = "/panel/webhooks/"
SHOWN_SECRET = re.compile(r'<code id="new-signing-secret">(whsec_[0-9A-Za-z]{43})</code>')


def create(client: Client, **fields):
    data = {"url": URL, "events": ["server.started", "server.crashed"], **fields}
    return client.post(f"{PANEL}new", data)


def audit_actions() -> list[str]:
    return list(AuditRecord.objects.filter(source=Source.PANEL).values_list("action", flat=True))


# List and create


def test_it_lists_only_the_current_organizations_webhooks(alice_client, webhook, globex):
    webhook_create(
        organization=globex,
        url="https://globex.example.com/",
        events=["server.started"],
        actor=TEST_ACTOR,
    )
    page = alice_client.get(PANEL).content.decode()
    assert webhook.id in page
    assert "globex.example.com" not in page


def test_it_sends_anonymous_visitors_to_the_login_page(client, webhook):
    response = client.get(PANEL)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_it_offers_the_ten_events_as_checkboxes(alice_client):
    page = alice_client.get(f"{PANEL}new").content.decode()
    assert page.count('type="checkbox" name="events"') == 10
    assert 'value="server.suspended"' in page and 'value="server.unsuspended"' in page


def test_it_shows_the_signing_secret_once_after_creation(alice_client):
    response = create(alice_client, description="pager")
    assert response.status_code == 200
    (secret,) = SHOWN_SECRET.findall(response.content.decode())
    webhook = Webhook.objects.get()
    assert decrypt_secret(webhook.encrypted_secret) == secret
    assert (webhook.url, webhook.events) == (URL, ["server.started", "server.crashed"])
    assert response["Cache-Control"].startswith("max-age=0")
    assert secret not in alice_client.get(PANEL).content.decode()
    assert secret not in alice_client.get(f"{PANEL}{webhook.id}/edit").content.decode()


def test_it_refuses_a_private_url_naming_the_rule(alice_client):
    response = create(alice_client, url="https://192.168.1.10/hook")
    assert response.status_code == 422
    assert "private_address" in response.content.decode()
    assert not Webhook.objects.exists()


def test_it_refuses_a_webhook_without_events(alice_client):
    response = create(alice_client, events=[])
    assert response.status_code == 400
    assert "Pick at least one event." in response.content.decode()


def test_it_audits_the_creation_without_the_secret(alice_client):
    secret = SHOWN_SECRET.findall(create(alice_client).content.decode())[0]
    record = AuditRecord.objects.get(source=Source.PANEL)
    assert (record.action, record.actor_email) == (PanelAction.WEBHOOK_CREATE, "alice@acme.test")
    assert secret not in str(AuditRecord.objects.values().get())


# Edit and delete


def test_it_edits_events_url_and_description(alice_client, webhook):
    data = {"url": "https://new.example.com/in", "events": ["server.migrated"], "description": "x"}
    response = alice_client.post(f"{PANEL}{webhook.id}/edit", data)
    assert response.status_code == 302
    webhook.refresh_from_db()
    assert (webhook.url, webhook.events, webhook.description) == (
        "https://new.example.com/in",
        ["server.migrated"],
        "x",
    )
    assert audit_actions() == [PanelAction.WEBHOOK_UPDATE]


def test_it_refuses_an_unsafe_url_on_edit(alice_client, webhook):
    data = {"url": "http://new.example.com/", "events": ["server.started"]}
    response = alice_client.post(f"{PANEL}{webhook.id}/edit", data)
    assert response.status_code == 422
    assert "https_required" in response.content.decode()


def test_it_asks_before_deleting(alice_client, webhook):
    response = alice_client.get(f"{PANEL}{webhook.id}/delete")
    assert response.status_code == 200
    assert "Delete webhook" in response.content.decode()
    assert Webhook.objects.exists()


def test_it_deletes_on_post_with_the_history(alice_client, webhook):
    make_delivery(webhook)
    response = alice_client.post(f"{PANEL}{webhook.id}/delete")
    assert response.status_code == 302
    assert not Webhook.objects.exists() and not Delivery.objects.exists()
    assert audit_actions() == [PanelAction.WEBHOOK_DELETE]


# Test ping


@pytest.mark.usefixtures("engine_settings")
def test_it_sends_a_test_ping_and_shows_the_result(alice_client, acme, receiver):
    webhook, _ = webhook_create(
        organization=acme,
        url=f"https://{HOST}:{receiver.port}/hook",
        events=["server.started"],
        actor=TEST_ACTOR,
    )
    receiver.set_behaviour(status=202, body=b"thanks")
    response = alice_client.post(f"{PANEL}{webhook.id}/test")
    assert response.status_code == 200
    page = response.content.decode()
    assert "202" in page and "thanks" in page and "accepted the ping" in page
    assert len(receiver.requests) == 1
    assert audit_actions() == [PanelAction.WEBHOOK_TEST]


def test_it_sends_no_test_ping_on_get(alice_client, webhook):
    assert alice_client.get(f"{PANEL}{webhook.id}/test").status_code == 405


# History and redelivery


def test_it_shows_the_delivery_history(alice_client, webhook):
    delivery = make_delivery(webhook, status=DeliveryStatus.FAILED)
    page = alice_client.get(f"{PANEL}{webhook.id}/deliveries").content.decode()
    assert delivery.id in page and "failed" in page


def test_it_filters_the_history_by_status(alice_client, webhook):
    failed = make_delivery(webhook, status=DeliveryStatus.FAILED)
    succeeded = make_delivery(webhook, status=DeliveryStatus.SUCCESS)
    page = alice_client.get(f"{PANEL}{webhook.id}/deliveries?status=failed").content.decode()
    assert failed.id in page and succeeded.id not in page


def test_it_filters_the_history_by_event(alice_client, webhook):
    crashed = make_delivery(webhook)
    started = make_delivery(webhook, event=Event.SERVER_STARTED)
    page = alice_client.get(f"{PANEL}{webhook.id}/deliveries?event=server.started").content.decode()
    assert started.id in page and crashed.id not in page


def test_it_shows_each_attempt_of_a_delivery(alice_client, webhook):
    delivery = make_delivery(webhook)
    add_attempt(delivery, 1, response_body="upstream busy", response_headers={"X-Trace": "t-1"})
    page = alice_client.get(f"{PANEL}{webhook.id}/deliveries/{delivery.id}").content.decode()
    assert "Attempt 1" in page
    assert "503" in page and "upstream busy" in page and "X-Trace: t-1" in page
    assert f"X-Webhook-Delivery: {delivery.id}" in page
    assert "40 ms" in page


def test_it_redelivers_one_delivery(alice_client, webhook):
    delivery = make_delivery(webhook, status=DeliveryStatus.FAILED)
    response = alice_client.post(f"{PANEL}{webhook.id}/deliveries/{delivery.id}/redeliver")
    assert response.status_code == 302
    assert Delivery.objects.get().redelivery_requested_at is not None
    record = AuditRecord.objects.get(source=Source.PANEL)
    assert (record.action, record.server_id) == (PanelAction.WEBHOOK_REDELIVER, delivery.server_id)


def test_it_redelivers_all_failed_deliveries(alice_client, webhook):
    failed = make_delivery(webhook, status=DeliveryStatus.FAILED)
    pending = make_delivery(webhook)
    response = alice_client.post(f"{PANEL}{webhook.id}/deliveries/redeliver-failed")
    assert response.status_code == 302
    marks = dict(Delivery.objects.values_list("id", "redelivery_requested_at"))
    assert marks[failed.id] is not None and marks[pending.id] is None
    assert audit_actions() == [PanelAction.WEBHOOK_REDELIVER]


# Who may do what


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "{id}/edit"),
        ("post", "{id}/edit"),
        ("get", "{id}/delete"),
        ("post", "{id}/delete"),
        ("post", "{id}/test"),
        ("get", "{id}/deliveries"),
        ("get", "{id}/deliveries/{dlv}"),
        ("post", "{id}/deliveries/{dlv}/redeliver"),
        ("post", "{id}/deliveries/redeliver-failed"),
    ],
)
def test_it_hides_another_organizations_webhook(charlie_client, webhook, method, path):
    delivery = make_delivery(webhook)
    url = PANEL + path.format(id=webhook.id, dlv=delivery.id)
    assert getattr(charlie_client, method)(url).status_code == 404
    assert Webhook.objects.get().events == webhook.events
    assert Delivery.objects.get().redelivery_requested_at is None


@pytest.mark.parametrize(("method", "path"), [("get", ""), ("get", "new"), ("post", "new")])
def test_it_refuses_a_member_without_webhook_scopes(bob_client, method, path):
    response = getattr(bob_client, method)(PANEL + path, {"url": URL, "events": ["server.started"]})
    assert response.status_code == 403
    assert not Webhook.objects.exists()


def test_it_checks_csrf_on_every_post(alice, webhook):
    delivery = make_delivery(webhook, status=DeliveryStatus.FAILED)
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice.user)
    paths = [
        "new",
        f"{webhook.id}/edit",
        f"{webhook.id}/delete",
        f"{webhook.id}/test",
        f"{webhook.id}/deliveries/{delivery.id}/redeliver",
        f"{webhook.id}/deliveries/redeliver-failed",
    ]
    for path in paths:
        response = client.post(PANEL + path, {"url": URL, "events": ["server.started"]})
        assert response.status_code == 403, path
    assert Webhook.objects.get().url == URL
    assert Delivery.objects.get().redelivery_requested_at is None
