"""One attempt: the URL re-check, the secret, the signed request, the answer.

Nothing here touches the database, so it can run on any sender thread. The URL is parsed once,
by ``check_webhook_url``; the process's client (``webhooks.targets.client``) connects to what
that returned.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from django.utils import timezone

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
from webhooks.targets.transport import (
    USER_AGENT,
    AttemptResult,
)
from webhooks.targets.url_safety import CheckedUrl, UnsafeWebhookUrl, check_webhook_url

if TYPE_CHECKING:
    from webhooks.delivery.claims import Claim
    from webhooks.models import Webhook

EVENT_HEADER: Final = "X-Webhook-Event"
DELIVERY_HEADER: Final = "X-Webhook-Delivery"
STANDARD_HEADERS: Final = (STANDARD_ID_HEADER, STANDARD_TIMESTAMP_HEADER, STANDARD_SIGNATURE_HEADER)


# --- requests ---------------------------------------------------------------------------------


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


def _checked(
    url: str,
    encrypted_secret: str,
    encrypted_previous_secret: str,
    previous_secret_expires_at: datetime | None,
) -> tuple[CheckedUrl, SigningKeys] | AttemptResult:
    """Where to send and the signing keys (the current secret, and a rolled one's predecessor
    during its grace period), or the refusal when the URL (re-checked before every attempt,
    as written) or the secret forbids sending."""
    try:
        target = check_webhook_url(url)
    except UnsafeWebhookUrl:
        return refused(AttemptError.ADDRESS_REJECTED)
    keys = signing_keys(encrypted_secret, encrypted_previous_secret, previous_secret_expires_at)
    if keys is None:
        return refused(AttemptError.SIGNING_SECRET_UNUSABLE)
    return target, keys


def _send_signed(
    to: Claim | Webhook, body: bytes, message_id: str, extra: dict[str, str] | None = None
) -> AttemptResult:
    """Check the URL and the secrets of `to`, then send `body` signed under `message_id`."""
    checked = _checked(
        to.url, to.encrypted_secret, to.encrypted_previous_secret, to.previous_secret_expires_at
    )
    if isinstance(checked, AttemptResult):
        return checked
    target, keys = checked
    headers = signed_headers(keys, body, message_id, extra)
    return client.get_sender().send(target=target, body=body, headers=headers)


def send_delivery(claim: Claim) -> AttemptResult:
    """One attempt of a claimed delivery: fresh timestamp and signature, the stored body."""
    extra = {EVENT_HEADER: claim.event, DELIVERY_HEADER: claim.delivery_id}
    return _send_signed(claim, claim.body.encode(), claim.delivery_id, extra)


def ping_body(webhook_id: str) -> bytes:
    payload = {
        "type": "ping",
        "webhook_id": webhook_id,
        "occurred_at": format_timestamp(timezone.now()),
    }
    return compact_json(payload).encode()


def send_ping(webhook: Webhook) -> AttemptResult:
    """The test ping: signed like a delivery, without the event and delivery headers."""
    return _send_signed(webhook, ping_body(webhook.id), new_id("png"))
