"""A signed request to a webhook's URL, as deliveries and the test ping both send it: the URL
re-checked as written (an address that stopped passing is refused, never sent to), the
signing keys (the current secret, and a rolled one's predecessor during its grace period),
the headers in their documented order, then the POST through this process's client."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, Protocol

from django.utils import timezone

from gshost.handoff import require_outside_transaction
from gshost.ids import format_timestamp, new_id
from webhooks.models import AttemptError
from webhooks.secrets import SigningKeys, signing_keys
from webhooks.signing import (
    SIGNATURE_HEADER,
    STANDARD_ID_HEADER,
    STANDARD_SIGNATURE_HEADER,
    STANDARD_TIMESTAMP_HEADER,
    TIMESTAMP_HEADER,
    signature_headers,
)
from webhooks.targets import client
from webhooks.targets.transport import USER_AGENT, AttemptResult
from webhooks.targets.url_safety import UnsafeWebhookUrl, check_webhook_url

if TYPE_CHECKING:
    from webhooks.models import Webhook

EVENT_HEADER: Final = "X-Webhook-Event"
DELIVERY_HEADER: Final = "X-Webhook-Delivery"
STANDARD_HEADERS: Final = (STANDARD_ID_HEADER, STANDARD_TIMESTAMP_HEADER, STANDARD_SIGNATURE_HEADER)


class Destination(Protocol):
    """A webhook, or a claimed delivery carrying its webhook's columns."""

    @property
    def url(self) -> str: ...
    @property
    def encrypted_secret(self) -> str: ...
    @property
    def encrypted_previous_secret(self) -> str: ...
    @property
    def previous_secret_expires_at(self) -> datetime | None: ...


def compact_json(payload: object) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def signed_headers(
    keys: SigningKeys, body: bytes, message_id: str, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """Content-Type, signature, timestamp and User-Agent in their documented order, then
    ``extra`` (the event and delivery headers), then the Standard Webhooks headers."""
    signed = signature_headers(
        keys.current, body, message_id=message_id, previous_secret=keys.previous
    )
    return {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signed[SIGNATURE_HEADER],
        TIMESTAMP_HEADER: signed[TIMESTAMP_HEADER],
        "User-Agent": USER_AGENT,
        **(extra or {}),
        **{name: signed[name] for name in STANDARD_HEADERS},
    }


def refused(error: AttemptError) -> AttemptResult:
    """The record of an attempt stopped before anything was sent."""
    return AttemptResult(
        started_at=datetime.now(UTC),
        duration_ms=0,
        status_code=None,
        response_body="",
        request_headers={},
        response_headers={},
        error=error.value,
    )


def send_signed(
    to: Destination, body: bytes, message_id: str, extra: dict[str, str] | None = None
) -> AttemptResult:
    """Check the URL and the secrets of ``to``, then send ``body`` signed under
    ``message_id``; a URL or secret that forbids sending is refused without a request."""
    require_outside_transaction("A webhook send")
    try:
        target = check_webhook_url(to.url)
    except UnsafeWebhookUrl:
        return refused(AttemptError.ADDRESS_REJECTED)
    keys = signing_keys(
        to.encrypted_secret, to.encrypted_previous_secret, to.previous_secret_expires_at
    )
    if keys is None:
        return refused(AttemptError.SIGNING_SECRET_UNUSABLE)
    headers = signed_headers(keys, body, message_id, extra)
    return client.get_sender().send(target=target, body=body, headers=headers)


def ping_body(webhook_id: str) -> bytes:
    payload = {
        "type": "ping",
        "webhook_id": webhook_id,
        "occurred_at": format_timestamp(timezone.now()),
    }
    return compact_json(payload).encode()


def send_ping(webhook: Webhook) -> AttemptResult:
    """The test ping: signed like a delivery, without the event and delivery headers."""
    return send_signed(webhook, ping_body(webhook.id), new_id("png"))
