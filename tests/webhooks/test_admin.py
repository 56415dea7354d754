"""Staff admin for webhooks and deliveries: read-only, never the secret, redelivery action."""

import pytest
from django.contrib.admin.utils import quote

from audit.actors import Actor
from audit.models import AuditRecord
from audit.services import PanelAction
from tests.webhooks.webhook_fixtures import URL, add_attempt, make_delivery
from webhooks.models import Delivery, DeliveryStatus, Webhook
from webhooks.services import webhook_create

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


@pytest.fixture
def created(acme) -> tuple[Webhook, str]:
    return webhook_create(organization=acme, url=URL, events=["server.crashed"], actor=TEST_ACTOR)


def test_it_never_shows_the_signing_secret(staff_client, created):
    webhook, secret = created
    for url in ["/admin/webhooks/webhook/", f"/admin/webhooks/webhook/{quote(webhook.pk)}/change/"]:
        page = staff_client.get(url).content.decode()
        assert webhook.id in page, url
        assert secret not in page, url
        assert webhook.encrypted_secret not in page, url
        assert "encrypted_secret" not in page, url


def test_it_offers_no_way_to_add_or_delete_a_webhook(staff_client, created):
    webhook, _ = created
    assert staff_client.get("/admin/webhooks/webhook/add/").status_code == 403
    assert (
        staff_client.get(f"/admin/webhooks/webhook/{quote(webhook.pk)}/delete/").status_code == 403
    )


def test_it_shows_a_delivery_with_its_attempts_read_only(staff_client, created):
    delivery = make_delivery(created[0], status=DeliveryStatus.FAILED)
    add_attempt(delivery, 1, response_body="first failure")
    add_attempt(delivery, 2, response_body="second failure")
    page = staff_client.get(f"/admin/webhooks/delivery/{quote(delivery.pk)}/change/")
    assert page.status_code == 200
    content = page.content.decode()
    assert "first failure" in content and "second failure" in content
    assert 'name="_save"' not in content


def test_it_redelivers_the_selected_deliveries(staff_client, created):
    chosen, other = make_delivery(created[0]), make_delivery(created[0])
    response = staff_client.post(
        "/admin/webhooks/delivery/",
        {"action": "redeliver_selected", "_selected_action": [chosen.pk]},
    )
    assert response.status_code == 302
    marks = dict(Delivery.objects.values_list("id", "redelivery_requested_at"))
    assert marks[chosen.id] is not None and marks[other.id] is None


def test_it_audits_an_admin_redelivery_as_the_staff_member(staff_client, created):
    delivery = make_delivery(created[0])
    staff_client.post(
        "/admin/webhooks/delivery/",
        {"action": "redeliver_selected", "_selected_action": [delivery.pk]},
    )
    record = AuditRecord.objects.get(action=PanelAction.WEBHOOK_REDELIVER)
    assert (record.actor_email, record.organization_id) == (
        "staff@gshost.test",
        delivery.organization_id,
    )


def test_it_lists_attempts_read_only(staff_client, created):
    attempt = add_attempt(make_delivery(created[0]), 1)
    assert staff_client.get("/admin/webhooks/deliveryattempt/").status_code == 200
    assert staff_client.get("/admin/webhooks/deliveryattempt/add/").status_code == 403
    change = staff_client.get(f"/admin/webhooks/deliveryattempt/{quote(attempt.pk)}/change/")
    assert 'name="_save"' not in change.content.decode()
