"""Failure notices: the organization's owners are emailed when a delivery ends `failed`.

At most one notice per webhook per ``WEBHOOK_FAILURE_NOTICE_HOURS``, across every process: the
right to send is claimed on the webhook row by compare-and-set (``failure_notice_sent_at``),
so two workers recording failures of the same webhook at once send one email. The engine calls
``deliveries_failed`` after its transaction commits; nothing here can undo or fail that
recording, and a notice that could not be sent gives its claim back.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Final

from django.conf import settings
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from accounts.services import email_owners
from webhooks.models import Delivery, Webhook

logger = logging.getLogger(__name__)


def deliveries_failed(delivery_ids: Collection[str]) -> int:
    """Tell the owners about these newly failed deliveries; how many emails went out.

    Never raises: a failure notice is a courtesy, the delivery rows are the truth.
    """
    try:
        return _notify(delivery_ids)
    except Exception:
        logger.exception("Could not send webhook failure notices")
        return 0


def _notify(delivery_ids: Collection[str]) -> int:
    if not delivery_ids:
        return 0
    first_by_webhook: dict[str, Delivery] = {}
    failed = Delivery.objects.filter(id__in=list(delivery_ids)).select_related("webhook")
    for delivery in failed.order_by("created_at"):
        first_by_webhook.setdefault(delivery.webhook_id, delivery)
    sent = 0
    for delivery in first_by_webhook.values():
        previous = delivery.webhook.failure_notice_sent_at
        moment = timezone.now()
        if not _claim_notice(delivery.webhook, previous, moment):
            continue
        if _send(delivery):
            sent += 1
        else:
            _give_back_claim(delivery.webhook, previous, moment)
    return sent


def _claim_notice(webhook: Webhook, previous: datetime | None, moment: datetime) -> bool:
    """Take the webhook's notice slot if the window since the last notice has passed."""
    window = timedelta(hours=float(settings.WEBHOOK_FAILURE_NOTICE_HOURS))
    if previous is not None and previous > moment - window:
        return False
    unchanged = (
        Q(failure_notice_sent_at__isnull=True)
        if previous is None
        else Q(failure_notice_sent_at=previous)
    )
    return (
        Webhook.objects.filter(unchanged, pk=webhook.pk).update(failure_notice_sent_at=moment) == 1
    )


def _give_back_claim(webhook: Webhook, previous: datetime | None, moment: datetime) -> None:
    Webhook.objects.filter(pk=webhook.pk, failure_notice_sent_at=moment).update(
        failure_notice_sent_at=previous
    )


def panel_link(path: str) -> str:
    return settings.PUBLIC_BASE_URL.rstrip("/") + path


# Characters that reorder or hide the text around them (Trojan Source), removed from quotes.
BIDI_CONTROLS: Final = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
QUOTED_BODY_CHARACTERS: Final = 300
CUSTOMER_MARK: Final = "| "


def customer_text(text: str) -> str:
    """Text a customer (or their endpoint) wrote, made safe to quote on one line of a plain-text
    email: bidirectional controls removed, line breaks and other control characters spaced."""
    kept = (character for character in text if character not in BIDI_CONTROLS)
    return "".join(" " if not c.isprintable() else c for c in kept)


def _last_response_body(delivery: Delivery) -> str:
    attempt = delivery.attempts.order_by("-number").first()
    return attempt.response_body if attempt is not None else ""


def notice_message(delivery: Delivery) -> tuple[str, str]:
    """The subject and body: what failed, where, why, and where to look.

    What the customer wrote (the description and URL) and what their endpoint answered are
    quoted on lines marked with "| " under a heading saying so, never as the email's own words.
    """
    webhook = delivery.webhook
    hours = settings.WEBHOOK_FAILURE_NOTICE_HOURS
    history = panel_link(reverse("webhooks_panel:deliveries", args=[webhook.id]))
    detail = panel_link(reverse("webhooks_panel:delivery", args=[webhook.id, delivery.id]))
    subject = f"[gshost] Webhook delivery failed: {delivery.event} to {webhook.id}"
    quoted = [f"URL: {customer_text(webhook.url)}"]
    if webhook.description:
        quoted.append(f"Description: {customer_text(webhook.description)}")
    response = customer_text(_last_response_body(delivery))[:QUOTED_BODY_CHARACTERS]
    if response:
        quoted.append(f"Last response body (from your endpoint): {response}")
    lines = [
        f"A delivery to your webhook {webhook.id} failed after its last attempt.",
        "",
        f"Webhook: {webhook.id}",
        f"Event: {delivery.event}",
        f"Delivery: {delivery.id}",
        f"Last error: {delivery.last_error or 'unknown'}",
        "",
        "Quoted as your organization wrote it (not written by gshost):",
        *(CUSTOMER_MARK + line for line in quoted),
        "",
        f"This delivery: {detail}",
        f"Failed deliveries of this webhook: {history}?status=failed",
        "",
        "The webhook stays active; later events are still sent. Once the endpoint is fixed,",
        "failed deliveries can be sent again from the delivery history.",
        f"You get at most one such email per webhook every {hours} hours.",
    ]
    return subject, "\n".join(lines)


def _send(delivery: Delivery) -> bool:
    subject, body = notice_message(delivery)
    return email_owners(delivery.organization_id, subject, body)  # nobody to tell: slot used
