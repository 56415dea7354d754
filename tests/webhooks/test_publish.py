"""publish_event: one delivery per subscribed active webhook, in the caller's transaction."""

import json
from datetime import UTC, datetime

import pytest
from django.db import transaction
from freezegun import freeze_time

from audit.actors import Actor
from webhooks import dispatch
from webhooks.events import Event
from webhooks.models import Delivery, DeliveryStatus, Webhook
from webhooks.services import publish_event, webhook_create

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


SERVER_ID = "srv_0000000000000000000A"
OCCURRED = datetime(2026, 11, 22, 10, 15, 3, 120456, tzinfo=UTC)


@pytest.fixture
def queued(monkeypatch) -> list[tuple[str, list[str]]]:
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(dispatch, "async_task", lambda name, ids: calls.append((name, ids)))
    return calls


def hook(organization, *events: Event, url: str = "https://hooks.example.com/x") -> Webhook:
    webhook, _ = webhook_create(
        organization=organization, url=url, events=list(events), actor=TEST_ACTOR
    )
    return webhook


def publish(organization, event: Event = Event.SERVER_CRASHED, **overrides) -> list[Delivery]:
    arguments = {
        "organization_id": organization.id,
        "server_id": SERVER_ID,
        "server_name": "Survival",
        "event": event,
        "data": {"reason": "exited", "exit_code": 137},
        "occurred_at": OCCURRED,
        **overrides,
    }
    return publish_event(**arguments)


def test_it_writes_one_delivery_per_subscribed_webhook(acme):
    first = hook(acme, Event.SERVER_CRASHED)
    second = hook(acme, Event.SERVER_STARTED, Event.SERVER_CRASHED)
    deliveries = publish(acme)
    assert {d.webhook_id for d in deliveries} == {first.id, second.id}
    assert Delivery.objects.count() == 2


def test_it_skips_webhooks_not_subscribed_to_the_event(acme):
    hook(acme, Event.SERVER_STARTED)
    assert publish(acme) == []
    assert not Delivery.objects.exists()


def test_it_skips_other_organizations_webhooks(acme, globex):
    hook(globex, Event.SERVER_CRASHED)
    assert publish(acme) == []


def test_it_skips_webhooks_that_are_not_active(acme):
    webhook = hook(acme, Event.SERVER_CRASHED)
    Webhook.objects.filter(pk=webhook.pk).update(status="disabled")
    assert publish(acme) == []


def test_it_writes_the_body_once_as_compact_json_in_the_contract_order(acme):
    hook(acme, Event.SERVER_CRASHED)
    (delivery,) = publish(acme, server_name="Überleben")
    expected = (
        '{"event":"server.crashed","occurred_at":"2026-11-22T10:15:03.120Z",'
        '"server":{"id":"srv_0000000000000000000A","name":"Überleben"},'
        '"data":{"reason":"exited","exit_code":137},'
        f'"delivery_id":"{delivery.id}"}}'
    )
    assert Delivery.objects.get().body == expected
    assert Delivery.objects.get().body.encode() == expected.encode("utf-8")


def test_it_names_the_row_in_the_payload(acme):
    hook(acme, Event.SERVER_CRASHED)
    (delivery,) = publish(acme)
    stored = Delivery.objects.get()
    assert json.loads(stored.body)["delivery_id"] == stored.id == delivery.id


def test_it_writes_pending_deliveries_due_now(acme):
    hook(acme, Event.SERVER_CRASHED)
    with freeze_time("2026-11-22 10:15:04"):
        publish(acme)
    delivery = Delivery.objects.get()
    assert delivery.status == DeliveryStatus.PENDING
    assert (
        delivery.next_attempt_at
        == delivery.created_at
        == datetime(2026, 11, 22, 10, 15, 4, tzinfo=UTC)
    )
    assert (delivery.event, delivery.server_id) == ("server.crashed", SERVER_ID)
    assert delivery.organization_id == acme.id


def test_it_defaults_occurred_at_to_now(acme):
    hook(acme, Event.SERVER_RESTARTED)
    with freeze_time("2026-11-22 10:15:04.5"):
        publish(acme, Event.SERVER_RESTARTED, occurred_at=None, data={})
    body = json.loads(Delivery.objects.get().body)
    assert (body["occurred_at"], body["data"]) == ("2026-11-22T10:15:04.500Z", {})


def test_it_queues_the_attempts_once_the_caller_commits(
    acme, queued, django_capture_on_commit_callbacks
):
    hook(acme, Event.SERVER_CRASHED)
    hook(acme, Event.SERVER_CRASHED)
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        deliveries = publish(acme)
        assert queued == []
    assert [sorted(pairs) for _, pairs in queued] == [
        sorted((d.id, d.webhook_id) for d in deliveries)
    ]
    assert queued[0][0] == "webhooks.tasks.attempt_deliveries"


def test_it_rolls_back_with_the_callers_transaction(
    acme, queued, django_capture_on_commit_callbacks
):
    hook(acme, Event.SERVER_CRASHED)
    with (
        django_capture_on_commit_callbacks(execute=True) as callbacks,
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        publish(acme)
        raise RuntimeError("the server change failed")
    assert not Delivery.objects.exists()
    assert callbacks == []
    assert queued == []


def test_it_queues_nothing_when_no_webhook_is_subscribed(acme, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        publish(acme)
    assert callbacks == []
