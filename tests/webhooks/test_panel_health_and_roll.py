"""Panel: rolling a signing secret (shown once, audited) and the endpoint-health chart."""

import re
from datetime import timedelta

from django.utils import timezone

from audit.models import AuditRecord, Source
from audit.services import PanelAction
from tests.webhooks.webhook_fixtures import make_delivery, webhook_fixture  # noqa: F401
from webhooks.health.rollup import apply_changes, settled_changes
from webhooks.models import DeliveryStatus, Webhook
from webhooks.secrets import decrypt_secret

PANEL = "/panel/webhooks/"
SHOWN_SECRET = re.compile(r'<code id="new-signing-secret">(whsec_[0-9A-Za-z]{43})</code>')


def settle(delivery, latency_ms=None):
    """Count the delivery as the engine does when it settles one."""
    apply_changes(
        settled_changes(
            webhook_id=delivery.webhook_id,
            created_at=delivery.created_at,
            before=DeliveryStatus.PENDING,
            after=delivery.status,
            latency_ms=latency_ms,
        )
    )


def roll(client, webhook, **data):
    return client.post(f"{PANEL}{webhook.id}/secret/roll", {"grace_hours": 24, **data})


def test_it_offers_the_roll_on_the_webhook_list(alice_client, webhook):
    page = alice_client.get(PANEL).content.decode()
    assert f'href="{PANEL}{webhook.id}/secret/roll"' in page


def test_it_shows_the_new_secret_once(alice_client, webhook):
    response = roll(alice_client, webhook)
    (secret,) = SHOWN_SECRET.findall(response.content.decode())
    webhook.refresh_from_db()
    assert decrypt_secret(webhook.encrypted_secret) == secret
    assert response["Cache-Control"].startswith("max-age=0")
    assert secret not in alice_client.get(PANEL).content.decode()


def test_it_keeps_the_old_secret_for_the_grace_asked(alice_client, webhook):
    old = decrypt_secret(webhook.encrypted_secret)
    before = timezone.now()
    roll(alice_client, webhook, grace_hours=2)
    webhook.refresh_from_db()
    assert decrypt_secret(webhook.encrypted_previous_secret) == old
    assert (
        timedelta(hours=2)
        <= webhook.previous_secret_expires_at - before
        < timedelta(hours=2, minutes=1)
    )


def test_it_refuses_a_grace_beyond_a_week(alice_client, webhook):
    old = webhook.encrypted_secret
    response = roll(alice_client, webhook, grace_hours=169)
    assert response.status_code == 400
    assert Webhook.objects.get(pk=webhook.pk).encrypted_secret == old


def test_it_audits_the_roll_without_the_secret(alice_client, webhook):
    secret = SHOWN_SECRET.findall(roll(alice_client, webhook).content.decode())[0]
    record = AuditRecord.objects.get(source=Source.PANEL)
    assert record.action == PanelAction.WEBHOOK_SECRET_ROLL
    assert secret not in str(AuditRecord.objects.values().get())


def test_it_lets_only_managers_roll(bob_client, webhook):
    assert roll(bob_client, webhook).status_code == 403


def test_it_shows_the_success_rate_and_latency_on_the_deliveries_page(alice_client, webhook):
    for latency in (200, 200):
        settle(make_delivery(webhook, status=DeliveryStatus.SUCCESS), latency)
    settle(make_delivery(webhook, status=DeliveryStatus.FAILED))
    page = alice_client.get(f"{PANEL}{webhook.id}/deliveries").content.decode()
    assert re.search(r'id="health-success-rate">67 %<', page)
    assert re.search(r"p50 \d+ ms · p95 \d+ ms", page)


def test_it_draws_the_hourly_chart_as_inline_svg(alice_client, webhook):
    settle(make_delivery(webhook, status=DeliveryStatus.SUCCESS), 100)
    settle(make_delivery(webhook, status=DeliveryStatus.FAILED))
    page = alice_client.get(f"{PANEL}{webhook.id}/deliveries").content.decode()
    chart = page[page.index('<svg id="health-chart"') : page.index("</svg>")]
    assert chart.count('class="bar-succeeded"') == 1
    assert chart.count('class="bar-failed"') == 1
    assert chart.count("<g>") == 25  # 24 hours back, and this hour
    assert "<script" not in page[page.index('id="endpoint-health"') : page.index("</section>")]
