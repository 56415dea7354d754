"""`Idempotency-Key` on the Application API's writes, after Stripe's: the first request with
a key is carried out and its answer stored for 24 h; the same key with the same request gets
that answer again, with another request `422 idempotency_key_reused`.

Exactly one request with a key is carried out, whatever the interleaving and however many web
processes: each first inserts the key's row in a transaction of its own, and the unique
(integration, key) constraint lets one insert in. The others wait for that row to hold its
answer (polling it), then replay it. A request that ends in a 5xx, a 429, or an exception
deletes its row, so a retry is carried out anew; so is a row left incomplete for longer than
`STALE_AFTER` (its process died).
"""

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework.response import Response

from application.errors import IdempotencyKeyInUse, IdempotencyKeyReused
from application.models import IdempotentRequest
from gshost.errors import InvalidInput

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
KEPT_FOR = timedelta(hours=24)
WAIT_SECONDS = 30.0
POLL_SECONDS = 0.05
STALE_AFTER = timedelta(minutes=5)
RETRY_AFTER_SECONDS = 1
REPLAYED_HEADER = "Idempotent-Replayed"


def request_hash(method: str, path: str, body: Any) -> str:
    canonical = json.dumps([method, path, body], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def clean_key(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not 1 <= len(raw) <= MAX_KEY_LENGTH or not raw.isprintable() or not raw.isascii():
        message = f"{HEADER} must be 1 to {MAX_KEY_LENGTH} printable ASCII characters."
        raise InvalidInput(message, fields={HEADER: [message]})
    return raw


def _claim(integration_pk: int, key: str, digest: str) -> IdempotentRequest | None:
    """None when this request holds the key now; else the row of the request that does."""
    try:
        with transaction.atomic():
            IdempotentRequest.objects.create(
                integration_id=integration_pk, key=key, request_hash=digest
            )
        return None
    except IntegrityError:
        return IdempotentRequest.objects.filter(integration_id=integration_pk, key=key).first()


@dataclass(frozen=True)
class About:
    """What a request was about (a customer, a server), for the audit."""

    organization_id: str = ""
    server_id: str = ""


def _replay(row: IdempotentRequest) -> tuple[Response, About]:
    assert row.status_code is not None
    response = Response(
        row.response_body, status=row.status_code, headers={REPLAYED_HEADER: "true"}
    )
    return response, About(row.organization_id, row.server_id)


def _settle(integration_pk: int, key: str, digest: str) -> IdempotentRequest | None:
    """Wait for the request holding the key: its completed row, or None once this request
    holds the key (the other gave it up, or died long ago)."""
    deadline = time.monotonic() + WAIT_SECONDS
    rows = IdempotentRequest.objects.filter(integration_id=integration_pk, key=key)
    row = _claim(integration_pk, key, digest)
    while row is not None:
        if row.created_at < timezone.now() - KEPT_FOR:  # kept its 24 h: the key is new again
            rows.filter(pk=row.pk).delete()
        elif row.request_hash != digest:
            raise IdempotencyKeyReused()
        elif row.completed_at is not None:
            return row
        elif row.created_at < timezone.now() - STALE_AFTER:
            rows.filter(pk=row.pk, completed_at__isnull=True).delete()
        elif time.monotonic() > deadline:
            raise IdempotencyKeyInUse(retry_after=RETRY_AFTER_SECONDS)
        else:
            time.sleep(POLL_SECONDS)
        row = rows.first() or _claim(integration_pk, key, digest)
    return None


def _kept(response: Response) -> bool:
    return response.status_code < 500 and response.status_code != 429


def idempotent(
    *,
    integration_pk: int,
    key: str | None,
    digest: str,
    carry_out: Callable[[], Response],
    about: Callable[[], About],
) -> tuple[Response, About | None]:
    """`carry_out()` once per key (it answers errors as responses, never raises them), and
    what it was about (`about()` after it); a replay answers what the first request was about."""
    if key is None:
        return carry_out(), None
    done = _settle(integration_pk, key, digest)
    if done is not None:
        return _replay(done)
    rows = IdempotentRequest.objects.filter(integration_id=integration_pk, key=key)
    try:
        response = carry_out()
    except BaseException:
        rows.delete()
        raise
    if not _kept(response):
        rows.delete()
        return response, None
    subject = about()
    rows.update(
        status_code=response.status_code,
        response_body=response.data,
        completed_at=timezone.now(),
        organization_id=subject.organization_id,
        server_id=subject.server_id,
    )
    return response, None
