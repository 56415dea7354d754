"""Failed authentications that name a key are audited at most FAILED_AUTH_ROWS_PER_MINUTE per
key and minute, so nobody who merely knows a key id can fill its organization's trail.

Past the limit the calls are not recorded one by one; once the minute is over, one row per key
says how many more there were (action ``auth.failures_not_recorded``, the count in its
``path``). The minute is the rate limiter's fixed window, shared through Redis like the API's
own limits. The process that refused the first unrecorded call writes that row, from a daemon
thread that looks once a second (and at exit).
"""

import atexit
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from accounts.key_records import KeyRecord
from audit.buffer import audit_buffer
from audit.models import ActorType, Source
from gshost import process_state
from gshost.api import rate_limits

FAILED_AUTH_ROWS_PER_MINUTE = 60
NOT_RECORDED_ACTION = "auth.failures_not_recorded"
SUMMARY_DELAY_SECONDS = 1.0  # after the minute, so that late counts of other processes land


@dataclass(frozen=True)
class _Summary:
    key_id: str
    organization_id: str
    window: int  # the rate limiter's window number (Unix minute)


_pending: set[_Summary] = set()
_lock = threading.Lock()
_sweeper: threading.Thread | None = None


def _bucket(key_id: str) -> str:
    return f"authaudit:{key_id}"


def should_record_failure(key: KeyRecord) -> bool:
    """Count one failed authentication naming `key`; whether it gets its own audit row."""
    state = rate_limits.hit(_bucket(key.key_id), FAILED_AUTH_ROWS_PER_MINUTE)
    if not state.exceeded:
        return True
    if state.remaining == -1:  # the first one past the limit, in all processes: its summary
        window = state.reset_at // rate_limits.WINDOW_SECONDS - 1
        _expect_summary(_Summary(key.key_id, key.organization_id, window))
    return False


def _expect_summary(summary: _Summary) -> None:
    with _lock:
        _pending.add(summary)
    start_sweeper()


def start_sweeper() -> None:
    """The one thread that writes due summaries, started with the first one expected."""
    global _sweeper
    with _lock:
        if _sweeper is None or not _sweeper.is_alive():
            _sweeper = threading.Thread(target=_sweep, name="audit-auth-failures", daemon=True)
            _sweeper.start()


def _sweep() -> None:
    while True:
        time.sleep(1.0)
        write_due_summaries()


def write_due_summaries(now: float | None = None, *, all_of_them: bool = False) -> int:
    """Write the summary rows of the minutes that are over (every pending one at exit)."""
    moment = time.time() if now is None else now
    with _lock:
        due = {
            summary
            for summary in _pending
            if all_of_them or moment >= _window_end(summary.window) + SUMMARY_DELAY_SECONDS
        }
        _pending.difference_update(due)
    for summary in sorted(due, key=lambda s: (s.window, s.key_id)):
        _write(summary)
    return len(due)


def _window_end(window: int) -> int:
    return (window + 1) * rate_limits.WINDOW_SECONDS


def _write(summary: _Summary) -> None:
    counted = rate_limits.total(_bucket(summary.key_id), summary.window)
    more = max(1, counted - FAILED_AUTH_ROWS_PER_MINUTE)
    start = datetime.fromtimestamp(summary.window * rate_limits.WINDOW_SECONDS, UTC)
    end = datetime.fromtimestamp(_window_end(summary.window), UTC)
    audit_buffer.add(
        {
            "organization_id": summary.organization_id,
            "occurred_at": end,
            "source": Source.API,
            "actor_type": ActorType.API_KEY,
            "actor_key_id": summary.key_id,
            "action": NOT_RECORDED_ACTION,
            "status_code": 401,
            "error_code": "invalid_token",
            "path": (
                f"{more} more failed authentications naming this key from "
                f"{start:%H:%M:%S}Z to {end:%H:%M:%S}Z were not recorded one by one"
            ),
        }
    )


def reset() -> None:
    """Forget the pending summaries (tests)."""
    with _lock:
        _pending.clear()


atexit.register(write_due_summaries, all_of_them=True)


process_state.register(
    "audit.failed_auth",
    bound="one summary per key past FAILED_AUTH_ROWS_PER_MINUTE in a minute, written and "
    "dropped a second after that minute ends; one sweeper thread",
    reset=reset,
)
