"""The delivery engine's entry points: test ping, attempting rows, the sweep, retention.

How a delivery moves (state lives in the rows; the queue only says "look at row N now"):

1. ``publish_event`` writes the row (pending, due now) and, after commit, queues the django-q2
   task ``attempt_deliveries`` naming (delivery id, webhook id) pairs. The task hands them to
   this process's delivery pool and returns at once.
2. The pool's dispatcher claims rows with a lease (``SELECT … FOR UPDATE SKIP LOCKED`` on
   PostgreSQL, compare-and-set elsewhere), never more than it has idle sender threads for, and
   at most ``WEBHOOK_MAX_IN_FLIGHT_PER_WEBHOOK`` on the network per webhook, so leases never
   wait in a queue and a dead endpoint cannot take every sender.
3. A sender thread makes the attempt; a recorder thread writes the attempt row and the new
   state in one transaction and gives the lease back. A worker that dies loses nothing: its
   leases (timeout + ``WEBHOOK_LEASE_MARGIN_SECONDS``) expire and the sweep takes the rows.
4. ``sweep`` (a task scheduled every minute, looping ~58 s) polls every second for anything due
   — retries, redeliveries, rows whose task was lost, rows whose worker died (lease expired) —
   and feeds them to the same pool, so a retry starts within seconds of its due time although
   django-q2's scheduler only ticks every 30 s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Final

from django.db import close_old_connections, transaction
from django.utils import timezone

from webhooks import attempts, claims
from webhooks.models import DELIVERY_HISTORY, Delivery, DeliveryAttempt, Webhook
from webhooks.pool import get_pool
from webhooks.sender import AttemptResult

logger = logging.getLogger(__name__)

# A little under the schedule's minute (its ticks come every ~30.5 s): sweeps rarely overlap,
# and the gap between two stays a few seconds, well inside the 10 s allowed for a retry.
SWEEP_SECONDS: Final = 58.0
SWEEP_INTERVAL_SECONDS: Final = 1.0
_PURGE_BATCH: Final = 1000


def send_test_ping(webhook: Webhook) -> AttemptResult:
    """Send the test ping now and return its result; nothing is stored, nothing retried."""
    return attempts.send_ping(webhook)


def attempt_deliveries(deliveries: Sequence[tuple[str, str]]) -> None:
    """Hand these rows, (delivery id, webhook id), to the process's sender pool; returns
    without waiting for them. Rows no longer due when the pool claims them are skipped."""
    if deliveries:
        get_pool().offer(deliveries, urgent=True)


def sweep(duration: float = SWEEP_SECONDS, interval: float = SWEEP_INTERVAL_SECONDS) -> None:
    """For ``duration`` seconds, feed everything due to the pool every ``interval`` seconds.

    Overlapping sweeps (in this or other processes) are harmless: claims are exclusive.
    """
    pool = get_pool()
    deadline = time.monotonic() + duration
    while True:
        close_old_connections()  # a broken or aged-out connection is replaced, once a round
        try:
            pool.offer_due()
        except Exception:
            logger.exception("Webhook sweep round failed")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(min(interval, remaining))


def deliver_due_now(delivery_ids: Sequence[str] | None = None) -> int:
    """Claim what is due (among ``delivery_ids`` if given) and attempt it on this thread.

    The synchronous engine: no pool, no threads. Returns the number of attempts made.
    """
    due = claims.due_candidates(ids=delivery_ids)
    taken = claims.claim_deliveries([delivery_id for delivery_id, _ in due])
    for claim in taken:
        claims.record_attempts([claims.Finished(claim, attempts.send_delivery(claim))])
    return len(taken)


def purge_delivery_history() -> int:
    """Delete deliveries (and their attempts) older than the history window, in batches."""
    cutoff = timezone.now() - DELIVERY_HISTORY
    purged = 0
    while True:
        ids = list(
            Delivery.objects.filter(created_at__lt=cutoff).values_list("id", flat=True)[
                :_PURGE_BATCH
            ]
        )
        if not ids:
            return purged
        with transaction.atomic():
            DeliveryAttempt.objects.filter(delivery_id__in=ids).delete()
            purged += Delivery.objects.filter(id__in=ids).delete()[0]
