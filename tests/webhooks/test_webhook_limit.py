"""At most WEBHOOKS_PER_ORGANIZATION webhooks per organization, in the API and the panel."""

import threading

import pytest
from django.db import connection

from accounts.models import Organization
from tests.conftest import client_for, error_of
from tests.webhooks.webhook_fixtures import TEST_ACTOR, URL, create
from webhooks.errors import WebhookLimitReached
from webhooks.models import Webhook
from webhooks.services import webhook_create


def _fill(organization: Organization, count: int) -> None:
    for number in range(count):
        webhook_create(
            organization=organization,
            url=f"{URL}/{number}",
            events=["server.started"],
            actor=TEST_ACTOR,
        )


def test_it_refuses_the_twenty_first_webhook_with_limit_reached(admin, acme):
    _fill(acme, 20)
    response = create(admin)
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["limit"]) == ("limit_reached", 20)
    assert Webhook.objects.filter(organization=acme).count() == 20


def test_the_limit_is_a_setting(admin, acme, settings):
    settings.WEBHOOKS_PER_ORGANIZATION = 2
    assert create(admin).status_code == 201
    assert create(admin).status_code == 201
    response = create(admin)
    assert (response.status_code, error_of(response)["limit"]) == (422, 2)


def test_a_deleted_webhook_frees_its_place(admin, acme, settings):
    settings.WEBHOOKS_PER_ORGANIZATION = 1
    first = create(admin).json()["id"]
    assert create(admin).status_code == 422
    assert admin.delete(f"/api/public/v1/webhooks/{first}").status_code == 204
    assert create(admin).status_code == 201


def test_the_limit_is_per_organization(admin, acme, globex, charlie, make_key, settings):
    settings.WEBHOOKS_PER_ORGANIZATION = 1
    assert create(admin).status_code == 201
    other = client_for(make_key(["webhooks:write"], membership=charlie))
    assert create(other).status_code == 201


def test_the_panel_refuses_the_twenty_first_webhook(alice_client, acme):
    _fill(acme, 20)
    response = alice_client.post(
        "/panel/webhooks/new", {"url": f"{URL}/more", "events": ["server.started"]}
    )
    assert response.status_code == 422
    body = response.content.decode()
    assert "limit_reached" in body
    assert "at most 20 webhooks" in body
    assert Webhook.objects.filter(organization=acme).count() == 20


@pytest.mark.django_db(transaction=True)
def test_concurrent_creations_do_not_pass_the_limit(settings):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite writes one transaction at a time")
    settings.WEBHOOKS_PER_ORGANIZATION = 3
    organization = Organization.objects.create(slug="race", name="Race")
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def create_one(number: int) -> None:
        start.wait()
        try:
            webhook_create(
                organization=organization,
                url=f"{URL}/{number}",
                events=["server.started"],
                actor=TEST_ACTOR,
            )
            outcomes.append("created")
        except WebhookLimitReached:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=create_one, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["created"] * 3 + ["refused"] * 5
    assert Webhook.objects.filter(organization=organization).count() == 3
