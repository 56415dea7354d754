"""At most PING_CONCURRENCY test pings of one organization on the network at once.

The slots live in the Django cache (Redis in production), so the cap holds across every web
process: slot `n` of an organization is a cache key added with `cache.add` (atomic: SET NX in
Redis) and leased for the ping's longest possible run, so a process that dies mid-ping frees
it when the lease ends. If the cache cannot be reached, the cap falls back to a per-process
one (the same number of slots in each web process): a cache outage never fails a ping with a
5xx, and pings stay bounded by processes x slots.
"""

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

from django.conf import settings
from django.core.cache import cache

from gshost import process_state
from webhooks.errors import PingLimitReached

logger = logging.getLogger(__name__)

PING_CONCURRENCY = 2
LEASE_MARGIN_SECONDS = 5.0


def _lease_seconds() -> float:
    return float(settings.WEBHOOK_TIMEOUT_SECONDS) + LEASE_MARGIN_SECONDS


def _slot_key(organization_id: str, slot: int) -> str:
    return f"webhooks:ping-slot:{organization_id}:{slot}"


def _retry_after(organization_id: str) -> int:
    """Seconds until the first slot's lease ends at the latest (a ping may end sooner)."""
    now = time.time()
    leases = cache.get_many([_slot_key(organization_id, n) for n in range(PING_CONCURRENCY)])
    ends = [float(value.split("|")[1]) for value in leases.values()]
    return max(1, math.ceil(min(ends, default=now + 1) - now))


def _take_shared(organization_id: str) -> str:
    token = uuid.uuid4().hex
    lease = _lease_seconds()
    for slot in range(PING_CONCURRENCY):
        key = _slot_key(organization_id, slot)
        if cache.add(key, f"{token}|{time.time() + lease}", timeout=math.ceil(lease)):
            return key + "#" + token
    raise PingLimitReached(_retry_after(organization_id))


def _give_back_shared(held: str) -> None:
    key, _, token = held.partition("#")
    try:
        value = cache.get(key)
        if value is not None and value.startswith(token + "|"):
            cache.delete(key)
    except Exception:  # the lease ends on its own
        logger.warning("Could not free test-ping slot %s; its lease will expire", key)


# The per-process fallback, used only while the cache is unreachable.
_local_lock = threading.Lock()
_local_in_flight: dict[str, int] = {}


def _take_local(organization_id: str) -> None:
    with _local_lock:
        if _local_in_flight.get(organization_id, 0) >= PING_CONCURRENCY:
            raise PingLimitReached(math.ceil(_lease_seconds()))
        _local_in_flight[organization_id] = _local_in_flight.get(organization_id, 0) + 1


def _give_back_local(organization_id: str) -> None:
    with _local_lock:
        left = _local_in_flight.get(organization_id, 1) - 1
        if left > 0:
            _local_in_flight[organization_id] = left
        else:
            _local_in_flight.pop(organization_id, None)


def reset() -> None:
    """Forget the per-process fallback's counts (tests)."""
    with _local_lock:
        _local_in_flight.clear()


class PingSlot:
    """A slot being held; `hold_until(event)` keeps it past the `with` block until `event` is
    set (the ping's abandoned name lookup has ended), at most for the slot's lease."""

    def __init__(self) -> None:
        self.busy: threading.Event | None = None

    def hold_until(self, event: threading.Event | None) -> None:
        self.busy = event


def _give_back_when_done(slot: PingSlot, give_back: Callable[[], None]) -> None:
    busy = slot.busy
    if busy is None or busy.is_set():
        give_back()
        return

    def wait_then_give_back() -> None:
        busy.wait(_lease_seconds())
        give_back()

    threading.Thread(target=wait_then_give_back, name="ping-slot", daemon=True).start()


@contextmanager
def ping_slot(organization_id: str) -> Iterator[PingSlot]:
    """Hold one of the organization's slots until the ping has really ended, or
    PingLimitReached."""
    try:
        held: str | None = _take_shared(organization_id)
    except PingLimitReached:
        raise
    except Exception:
        logger.warning("Cache unreachable: test pings are capped per process for now")
        held = None
        _take_local(organization_id)
    slot = PingSlot()
    try:
        yield slot
    finally:
        if held is not None:
            _give_back_when_done(slot, partial(_give_back_shared, held))
        else:
            _give_back_when_done(slot, partial(_give_back_local, organization_id))


process_state.register(
    "webhooks.ping_limit",
    bound=f"while the cache is unreachable, a count per organization with a test ping under "
    f"way (at most {PING_CONCURRENCY} each); a thread per ping whose abandoned name lookup "
    "holds its slot, ending within the slot's lease",
    reset=reset,
)
