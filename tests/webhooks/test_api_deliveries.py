"""Delivery history, one delivery, and redelivery (single and bulk) through the API."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from freezegun import freeze_time

from audit.actors import Actor
from gshost.ids import format_timestamp
from tests.conftest import error_of
from tests.webhooks.webhook_fixtures import (
    HOOKS,
    add_attempt,
    make_delivery,
)
from webhooks import dispatch
from webhooks.events import Event
from webhooks.models import BulkRedelivery, Delivery, DeliveryStatus
from webhooks.services import webhook_create

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


DELIVERY_FIELDS = {
    "id",
    "webhook_id",
    "event",
    "server_id",
    "status",
    "created_at",
    "next_attempt_at",
    "payload",
    "attempts",
}
ATTEMPT_FIELDS = {
    "number",
    "trigger",
    "started_at",
    "duration_ms",
    "status_code",
    "response_body",
    "request_headers",
    "response_headers",
    "error",
}


@pytest.fixture
def queued(monkeypatch) -> list[tuple[str, list[str]]]:
    """The attempt tasks queued (the queue itself is the engine's business)."""
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(dispatch, "async_task", lambda name, ids: calls.append((name, ids)))
    return calls


def deliveries_of(webhook) -> str:
    return f"{HOOKS}/{webhook.id}/deliveries"


def ids(response) -> list[str]:
    return [row["id"] for row in response.json()["results"]]


def redelivery_marks() -> dict[str, object]:
    return dict(Delivery.objects.values_list("id", "redelivery_requested_at"))


# History


def test_it_lists_deliveries_with_their_attempts(admin, webhook):
    delivery = make_delivery(webhook, status=DeliveryStatus.RETRY_SCHEDULED)
    add_attempt(delivery, 2, status_code=None, error="timeout", response_body="")
    add_attempt(delivery, 1)
    response = admin.get(deliveries_of(webhook))
    assert response.status_code == 200
    (row,) = response.json()["results"]
    assert set(row) == DELIVERY_FIELDS
    assert [attempt["number"] for attempt in row["attempts"]] == [1, 2]
    assert all(set(attempt) == ATTEMPT_FIELDS for attempt in row["attempts"])
    first, second = row["attempts"]
    assert (first["status_code"], first["error"], first["response_body"]) == (503, None, "busy")
    assert (second["status_code"], second["error"]) == (None, "timeout")
    assert first["response_headers"] == {"Retry-After": "60"}


def test_it_shows_the_payload_as_sent(admin, webhook):
    delivery = make_delivery(webhook)
    row = admin.get(deliveries_of(webhook)).json()["results"][0]
    assert list(row["payload"]) == ["event", "occurred_at", "server", "data", "delivery_id"]
    assert row["payload"]["delivery_id"] == delivery.id
    assert (row["webhook_id"], row["event"], row["status"]) == (
        webhook.id,
        "server.crashed",
        "pending",
    )


def test_it_lists_only_the_last_7_days(admin, webhook):
    now = timezone.now()
    recent = make_delivery(webhook, created_at=now - timedelta(days=6, hours=23))
    make_delivery(webhook, created_at=now - timedelta(days=8))
    assert ids(admin.get(deliveries_of(webhook))) == [recent.id]


def test_it_drops_a_delivery_from_the_history_once_it_is_8_days_old(admin, webhook):
    delivery = make_delivery(webhook)
    with freeze_time(timezone.now() + timedelta(days=8)):
        assert ids(admin.get(deliveries_of(webhook))) == []
        assert admin.get(f"{deliveries_of(webhook)}/{delivery.id}").status_code == 404
    assert ids(admin.get(deliveries_of(webhook))) == [delivery.id]


def test_it_pages_through_every_delivery_newest_first(admin, webhook):
    now = timezone.now()
    made = [make_delivery(webhook, created_at=now - timedelta(hours=h)) for h in range(5)]
    seen, url = [], f"{deliveries_of(webhook)}?limit=2"
    while url:
        page = admin.get(url).json()
        seen += [row["id"] for row in page["results"]]
        url = page["next"]
    assert seen == [delivery.id for delivery in made]


def test_it_keeps_pages_stable_while_new_deliveries_arrive(admin, webhook):
    now = timezone.now()
    made = [make_delivery(webhook, created_at=now - timedelta(hours=h)) for h in range(3)]
    first = admin.get(f"{deliveries_of(webhook)}?limit=2").json()
    make_delivery(webhook, created_at=now + timedelta(seconds=1))
    second = admin.get(first["next"]).json()
    assert [row["id"] for row in second["results"]] == [made[2].id]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=failed", ["failed"]),
        ("event=server.started", ["started"]),
        ("server_id=srv_00000000000000000OTHER", ["other-server"]),
        ("status=success&event=server.started", []),
        ("status=&event=&server_id=", ["failed", "started", "other-server"]),  # empty: unfiltered
    ],
)
def test_it_filters_the_history(admin, webhook, query, expected):
    made = {
        "failed": make_delivery(webhook, status=DeliveryStatus.FAILED),
        "started": make_delivery(webhook, event=Event.SERVER_STARTED),
        "other-server": make_delivery(webhook, server_id="srv_00000000000000000OTHER"),
    }
    response = admin.get(f"{deliveries_of(webhook)}?{query}")
    assert response.status_code == 200
    assert set(ids(response)) == {made[name].id for name in expected}


@pytest.mark.parametrize(
    "query", ["status=exploded", "event=player.joined", "limit=0", "server_id=srv_%00"]
)
def test_it_refuses_a_bad_filter_value(admin, webhook, query):
    response = admin.get(f"{deliveries_of(webhook)}?{query}")
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"


def test_it_names_every_bad_filter_in_one_answer(admin, webhook):
    response = admin.get(f"{deliveries_of(webhook)}?status=exploded&server_id=srv_%00")
    assert response.status_code == 400
    assert set(error_of(response)["fields"]) == {"status", "server_id"}


def test_it_lists_only_this_webhooks_deliveries(admin, webhook, acme):
    other, _ = webhook_create(
        organization=acme, url="https://b.example.com/", events=["server.started"], actor=TEST_ACTOR
    )
    make_delivery(other)
    assert ids(admin.get(deliveries_of(webhook))) == []


# One delivery


def test_it_retrieves_one_delivery(admin, webhook):
    delivery = make_delivery(webhook)
    add_attempt(delivery, 1)
    response = admin.get(f"{deliveries_of(webhook)}/{delivery.id}")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == DELIVERY_FIELDS
    assert (body["id"], len(body["attempts"])) == (delivery.id, 1)


def test_it_answers_not_found_for_a_delivery_of_another_webhook(admin, webhook, acme):
    other, _ = webhook_create(
        organization=acme, url="https://b.example.com/", events=["server.started"], actor=TEST_ACTOR
    )
    delivery = make_delivery(other)
    response = admin.get(f"{deliveries_of(webhook)}/{delivery.id}")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


# Redelivery of one


def test_it_redelivers_one_delivery_and_answers_202_with_it(
    admin, webhook, queued, django_capture_on_commit_callbacks
):
    delivery = make_delivery(webhook, status=DeliveryStatus.FAILED)
    moment = timezone.now() + timedelta(minutes=5)
    with freeze_time(moment), django_capture_on_commit_callbacks(execute=True):
        response = admin.post(f"{deliveries_of(webhook)}/{delivery.id}/redeliver")
    assert response.status_code == 202
    assert set(response.json()) == DELIVERY_FIELDS
    assert response.json()["id"] == delivery.id
    assert Delivery.objects.get().redelivery_requested_at == moment
    assert queued == [("webhooks.tasks.attempt_deliveries", [(delivery.id, webhook.id)])]


def test_it_queues_nothing_for_a_redelivery_that_does_not_commit(
    admin, webhook, queued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = admin.post(f"{deliveries_of(webhook)}/dlv_00000000000000000000/redeliver")
    assert response.status_code == 404
    assert queued == []


# Bulk redelivery


def bulk(admin, webhook, body=None, **headers):
    return admin.post(f"{deliveries_of(webhook)}/redeliver", body or {}, format="json", **headers)


def test_it_redelivers_every_failed_delivery(
    admin, webhook, queued, django_capture_on_commit_callbacks
):
    failed = [make_delivery(webhook, status=DeliveryStatus.FAILED) for _ in range(2)]
    kept = make_delivery(webhook, status=DeliveryStatus.SUCCESS)
    with django_capture_on_commit_callbacks(execute=True):
        response = bulk(admin, webhook, {"status": "failed"})
    assert (response.status_code, response.json()) == (202, {"count": 2})
    marks = redelivery_marks()
    assert all(marks[delivery.id] is not None for delivery in failed)
    assert marks[kept.id] is None
    assert [sorted(pairs) for _, pairs in queued] == [sorted((d.id, webhook.id) for d in failed)]


def test_it_redelivers_within_since_and_until(admin, webhook):
    now = timezone.now()
    made = [make_delivery(webhook, created_at=now - timedelta(hours=h)) for h in (1, 3, 5)]
    body = {
        "since": format_timestamp(now - timedelta(hours=4)),
        "until": format_timestamp(now - timedelta(hours=2)),
    }
    assert bulk(admin, webhook, body).json() == {"count": 1}
    assert [d for d, mark in redelivery_marks().items() if mark] == [made[1].id]


def test_it_redelivers_by_event(admin, webhook):
    make_delivery(webhook, event=Event.SERVER_STARTED)
    make_delivery(webhook, event=Event.SERVER_CRASHED)
    assert bulk(admin, webhook, {"event": "server.started"}).json() == {"count": 1}


def test_it_redelivers_the_whole_history_without_filters(admin, webhook):
    for _ in range(3):
        make_delivery(webhook)
    make_delivery(webhook, created_at=timezone.now() - timedelta(days=9))
    assert bulk(admin, webhook).json() == {"count": 3}


def test_it_only_counts_on_a_dry_run(admin, webhook, queued, django_capture_on_commit_callbacks):
    make_delivery(webhook, status=DeliveryStatus.FAILED)
    with django_capture_on_commit_callbacks(execute=True):
        response = bulk(admin, webhook, {"status": "failed", "dry_run": True})
    assert (response.status_code, response.json()) == (202, {"count": 1})
    assert list(redelivery_marks().values()) == [None]
    assert queued == []


def test_it_records_nothing_for_a_dry_run_with_an_idempotency_key(admin, webhook):
    make_delivery(webhook)
    bulk(admin, webhook, {"dry_run": True}, HTTP_IDEMPOTENCY_KEY="k-1")
    assert not BulkRedelivery.objects.exists()
    assert bulk(admin, webhook, {}, HTTP_IDEMPOTENCY_KEY="k-1").json() == {"count": 1}


def test_it_creates_nothing_new_when_an_idempotency_key_is_repeated(
    admin, webhook, queued, django_capture_on_commit_callbacks
):
    make_delivery(webhook, status=DeliveryStatus.FAILED)
    with django_capture_on_commit_callbacks(execute=True):
        first = bulk(admin, webhook, {"status": "failed"}, HTTP_IDEMPOTENCY_KEY="retry-all-1")
    Delivery.objects.update(redelivery_requested_at=None)
    make_delivery(webhook, status=DeliveryStatus.FAILED)
    with django_capture_on_commit_callbacks(execute=True):
        again = bulk(admin, webhook, {"status": "failed"}, HTTP_IDEMPOTENCY_KEY="retry-all-1")
    assert first.json() == again.json() == {"count": 1}
    assert again.status_code == 202
    assert set(redelivery_marks().values()) == {None}
    assert len(queued) == 1
    assert BulkRedelivery.objects.count() == 1


def test_it_treats_a_new_idempotency_key_as_a_new_request(admin, webhook):
    make_delivery(webhook)
    bulk(admin, webhook, {}, HTTP_IDEMPOTENCY_KEY="a")
    make_delivery(webhook)
    assert bulk(admin, webhook, {}, HTTP_IDEMPOTENCY_KEY="b").json() == {"count": 2}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"status": "exploded"}, "status"),
        ({"event": "player.joined"}, "event"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-11-20T10:00:00"}, "since"),
        ({"dry_run": "yes"}, "dry_run"),
        ({"since": "2026-11-21T00:00:00Z", "until": "2026-11-20T00:00:00Z"}, "until"),
    ],
)
def test_it_refuses_bad_bulk_filters(admin, webhook, body, field):
    response = bulk(admin, webhook, body)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_request"
    assert set(error["fields"]) == {field}


def test_it_refuses_an_overlong_idempotency_key(admin, webhook):
    response = bulk(admin, webhook, {}, HTTP_IDEMPOTENCY_KEY="k" * 201)
    assert response.status_code == 400
    assert set(error_of(response)["fields"]) == {"Idempotency-Key"}


def test_it_ids_every_delivery_with_its_prefix(admin, webhook):
    make_delivery(webhook)
    assert re.fullmatch(r"dlv_[0-9A-Za-z]{16,}", ids(admin.get(deliveries_of(webhook)))[0])
