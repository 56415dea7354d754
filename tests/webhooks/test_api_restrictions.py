"""A key restricted to servers reaches only its servers' deliveries, and changes no webhook
(a webhook receives every server's events)."""

from typing import Any

import pytest

from tests.conftest import client_for, error_of
from tests.webhooks.webhook_fixtures import HOOKS, URL, WEBHOOK_SCOPES, add_attempt, make_delivery
from webhooks import dispatch
from webhooks.models import Delivery, DeliveryStatus, Webhook


@pytest.fixture
def restricted(make_key, acme_server) -> Any:
    """Every webhook scope, restricted to Acme's first server."""
    return client_for(make_key(WEBHOOK_SCOPES, server_ids=[acme_server.id]))


@pytest.fixture
def own_and_other(webhook, acme_server, acme_other_server) -> tuple[Delivery, Delivery]:
    return (
        make_delivery(webhook, server_id=acme_server.id),
        make_delivery(webhook, server_id=acme_other_server.id),
    )


@pytest.fixture
def queued(monkeypatch) -> list[tuple[str, list[str]]]:
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(dispatch, "async_task", lambda name, ids: calls.append((name, ids)))
    return calls


def deliveries_of(webhook: Webhook) -> str:
    return f"{HOOKS}/{webhook.id}/deliveries"


def test_it_lists_only_the_deliveries_of_the_keys_servers(restricted, webhook, own_and_other):
    response = restricted.get(deliveries_of(webhook))
    assert response.status_code == 200
    assert [row["id"] for row in response.json()["results"]] == [own_and_other[0].id]


def test_it_answers_server_not_found_for_a_server_outside_the_list(
    restricted, webhook, own_and_other, acme_other_server
):
    response = restricted.get(deliveries_of(webhook), {"server_id": acme_other_server.id})
    assert response.status_code == 404
    assert error_of(response)["code"] == "server_not_found"


def test_it_does_not_show_another_servers_delivery(restricted, webhook, own_and_other):
    other = own_and_other[1]
    response = restricted.get(f"{deliveries_of(webhook)}/{other.id}")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"
    assert restricted.get(f"{deliveries_of(webhook)}/{own_and_other[0].id}").status_code == 200


def test_it_does_not_redeliver_another_servers_delivery(restricted, webhook, own_and_other, queued):
    other = own_and_other[1]
    response = restricted.post(f"{deliveries_of(webhook)}/{other.id}/redeliver")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"
    assert Delivery.objects.get(pk=other.pk).redelivery_requested_at is None
    assert queued == []


@pytest.mark.parametrize("dry_run", [True, False])
def test_it_bulk_redelivers_only_the_keys_servers(
    restricted, webhook, own_and_other, queued, dry_run
):
    response = restricted.post(
        f"{deliveries_of(webhook)}/redeliver", {"dry_run": dry_run}, format="json"
    )
    assert response.status_code == 202
    assert response.json() == {"count": 1}
    other = Delivery.objects.get(pk=own_and_other[1].pk)
    assert other.redelivery_requested_at is None


def test_an_unrestricted_key_still_reaches_every_server(admin, webhook, own_and_other):
    response = admin.get(deliveries_of(webhook))
    assert len(response.json()["results"]) == 2


def _refused(response: Any) -> None:
    assert response.status_code == 403, response.content
    error = error_of(response)
    assert error["code"] == "insufficient_scope"
    assert error["rule"] == "unrestricted_key_required"


def test_a_restricted_key_cannot_create_a_webhook(restricted):
    _refused(restricted.post(HOOKS, {"url": URL, "events": ["server.started"]}, format="json"))
    assert not Webhook.objects.exists()


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("patch", "", {"description": "mine now"}),
        ("delete", "", None),
        ("post", "/test", None),
        ("post", "/secret/rotate", {"grace_hours": 0}),
    ],
)
def test_a_restricted_key_cannot_change_a_webhook(restricted, webhook, method, suffix, body):
    before = Webhook.objects.values().get(pk=webhook.pk)
    response = getattr(restricted, method)(f"{HOOKS}/{webhook.id}{suffix}", body, format="json")
    _refused(response)
    assert Webhook.objects.values().get(pk=webhook.pk) == before


def test_a_restricted_key_still_reads_webhooks(restricted, webhook):
    assert restricted.get(HOOKS).status_code == 200
    assert restricted.get(f"{HOOKS}/{webhook.id}").status_code == 200


def test_the_stats_of_a_restricted_key_count_only_its_servers(
    restricted, admin, webhook, acme_server, acme_other_server
):
    make_delivery(webhook, server_id=acme_server.id, status=DeliveryStatus.SUCCESS)
    make_delivery(webhook, server_id=acme_other_server.id, status=DeliveryStatus.FAILED)
    make_delivery(webhook, server_id=acme_other_server.id, status=DeliveryStatus.PENDING)
    mine = restricted.get(f"{HOOKS}/{webhook.id}/stats").json()
    assert (mine["deliveries"], mine["succeeded"], mine["failed"], mine["pending"]) == (1, 1, 0, 0)
    assert sum(bucket["failed"] for bucket in mine["series"]) == 0
    everything = admin.get(f"{HOOKS}/{webhook.id}/stats").json()
    assert everything["pending"] == 1  # the hourly counts are the engine's; open rows are read


def test_the_latency_of_a_restricted_key_spans_its_deliveries_attempts(
    restricted, webhook, acme_server
):
    delivery = make_delivery(webhook, server_id=acme_server.id, status=DeliveryStatus.SUCCESS)
    add_attempt(delivery, 1)  # starts a minute after creation, 40 ms
    add_attempt(delivery, 2, status_code=200)  # a minute later, 80 ms: 60.08 s in all
    latency = restricted.get(f"{HOOKS}/{webhook.id}/stats").json()["latency_ms"]
    assert 60_080 * 0.95 <= latency["p50"] <= 60_080 * 1.05
