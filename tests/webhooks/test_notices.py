"""Failure notices: the owners are emailed once per webhook per window when a delivery fails."""

from datetime import timedelta

import pytest
from django.core import mail
from freezegun import freeze_time

from accounts.services import member_add
from tests.webhooks.webhook_fixtures import (  # noqa: F401
    add_attempt,
    make_delivery,
    webhook_fixture,
)
from webhooks.health.notices import _claim_notice, deliveries_failed
from webhooks.models import DeliveryStatus, Webhook

pytestmark = pytest.mark.usefixtures("locmem_email", "alice", "bob")

START = "2026-11-22T10:00:00Z"


@pytest.fixture
def locmem_email(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.PUBLIC_BASE_URL = "https://panel.gshost.example/"
    settings.WEBHOOK_FAILURE_NOTICE_HOURS = 24


def failed(webhook, **fields):
    return make_delivery(webhook, status=DeliveryStatus.FAILED, last_error="status_503", **fields)


def test_it_emails_the_owners_only(webhook):
    deliveries_failed([failed(webhook).id])
    assert [message.to for message in mail.outbox] == [["alice@acme.test"]]


def test_it_emails_every_owner(webhook, acme):
    member_add(organization=acme, email="dora@acme.test", password="dora-pw-123", owner=True)
    deliveries_failed([failed(webhook).id])
    assert mail.outbox[0].to == ["alice@acme.test", "dora@acme.test"]


def test_it_names_the_webhook_url_event_and_last_error(webhook):
    delivery = failed(webhook)
    deliveries_failed([delivery.id])
    body = mail.outbox[0].body
    assert webhook.id in body
    assert f"| URL: {webhook.url}" in body
    assert f"Event: {delivery.event}" in body
    assert "Last error: status_503" in body


def test_it_quotes_the_customers_text_marked_as_theirs_without_bidi_controls(webhook):
    tricky = "Payments \u202egnp.exe\u202c\nURGENT: reset your password at evil.example"
    Webhook.objects.filter(pk=webhook.pk).update(
        description=tricky, url="https://hooks.example.com/\u2066x\u2069"
    )
    delivery = failed(webhook)
    add_attempt(delivery, 1, response_body="<b>down</b>\u202e\r\nFrom: gshost support")
    deliveries_failed([delivery.id])
    message = mail.outbox[0]
    assert not any(c in message.body + message.subject for c in "\u202e\u202c\u2066\u2069")
    assert message.content_subtype == "plain"
    assert "Quoted as your organization wrote it (not written by gshost):" in message.body
    assert "| URL: https://hooks.example.com/x\n" in message.body
    assert "| Description: Payments gnp.exe URGENT: reset your password at evil.example\n" in (
        message.body
    )
    assert "| Last response body (from your endpoint): <b>down</b>  From: gshost support" in (
        message.body
    )
    for line in message.body.splitlines():  # nothing the customer wrote starts a line of ours
        assert not line.startswith(("URGENT", "From:")), line


def test_it_links_the_delivery_history_absolutely(webhook):
    delivery = failed(webhook)
    deliveries_failed([delivery.id])
    base = f"https://panel.gshost.example/panel/webhooks/{webhook.id}/deliveries"
    assert f"{base}?status=failed" in mail.outbox[0].body
    assert f"{base}/{delivery.id}\n" in mail.outbox[0].body


def test_it_sends_one_notice_for_several_failures_of_a_webhook(webhook):
    deliveries_failed([failed(webhook).id, failed(webhook).id])
    assert len(mail.outbox) == 1


def test_it_sends_no_second_notice_within_the_window(webhook):
    with freeze_time(START):
        deliveries_failed([failed(webhook).id])
    with freeze_time("2026-11-23T09:59:59Z"):
        deliveries_failed([failed(webhook).id])
    assert len(mail.outbox) == 1


def test_it_sends_again_once_the_window_has_passed(webhook):
    with freeze_time(START):
        deliveries_failed([failed(webhook).id])
    with freeze_time("2026-11-23T10:00:00Z"):
        deliveries_failed([failed(webhook).id])
    assert len(mail.outbox) == 2


def test_it_notices_each_webhook_separately(webhook, acme):
    other = Webhook.objects.create(
        organization=acme, url=webhook.url, events=webhook.events, encrypted_secret="x"
    )
    deliveries_failed([failed(webhook).id, failed(other).id])
    assert len(mail.outbox) == 2


def test_it_records_the_notice_time_on_the_webhook(webhook):
    with freeze_time(START):
        deliveries_failed([failed(webhook).id])
    webhook.refresh_from_db()
    assert webhook.failure_notice_sent_at.isoformat() == "2026-11-22T10:00:00+00:00"


def test_it_loses_the_race_when_another_process_claimed_the_slot(webhook):
    delivery = failed(webhook)
    # Another process sent a notice after this one read the row.
    Webhook.objects.filter(pk=webhook.pk).update(failure_notice_sent_at=delivery.created_at)
    webhook.failure_notice_sent_at = None
    assert not _claim_notice(webhook, None, delivery.created_at + timedelta(seconds=1))


def test_it_gives_the_slot_back_when_the_email_cannot_be_sent(webhook, settings):
    settings.EMAIL_BACKEND = "tests.webhooks.test_notices.BrokenBackend"
    deliveries_failed([failed(webhook).id])
    webhook.refresh_from_db()
    assert webhook.failure_notice_sent_at is None


def test_it_never_raises(webhook, settings):
    settings.EMAIL_BACKEND = "tests.webhooks.test_notices.BrokenBackend"
    assert deliveries_failed([failed(webhook).id]) == 0


def test_it_leaves_the_webhook_active(webhook):
    deliveries_failed([failed(webhook).id])
    webhook.refresh_from_db()
    assert webhook.status == "active"


class BrokenBackend:
    def __init__(self, **kwargs):
        pass

    def send_messages(self, messages):
        raise ConnectionRefusedError("no mail server")
