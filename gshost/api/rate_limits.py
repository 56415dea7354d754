"""Fixed one-minute windows: N quick calls pass and call N+1 in the window is refused.

Each process counts in memory. Without Redis (the embedded default, one web process) that
count is the whole truth. With Redis, the window's total is shared through one counter per
bucket; to spare a round trip on every request, a process may answer a few calls before
telling Redis about them, but never more than 1/8 of what the window had left when it last
looked, never for longer than SYNC_INTERVAL, and never when the call could be the one over
the limit. So one process decides exactly, and several can overshoot only if more than
eight of them race for the last eighth of a window at once.
"""

import logging
import os
import threading
import time
from dataclasses import dataclass
from functools import cache

import redis
from django.conf import settings

from gshost import process_state

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60
SYNC_INTERVAL = 0.1
LOCAL_SHARE = 8
OUTAGE_TIMEOUT_SECONDS = 0.5


@dataclass(frozen=True)
class RateLimitState:
    limit: int
    remaining: int
    reset_at: int  # Unix seconds when the window ends

    @property
    def exceeded(self) -> bool:
        return self.remaining < 0

    @property
    def retry_after(self) -> int:
        return max(1, self.reset_at - int(time.time()))

    def headers(self) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(max(self.remaining, 0)),
            "X-RateLimit-Reset": str(self.reset_at),
        }


@cache
def parse_rate(rate: str) -> int:
    """`300/min` -> 300 (settings validate the shape at start-up)."""
    return int(rate.partition("/")[0])


class RedisCounter:
    """INCRBY on one connection per thread, skipping redis-py's pool and retry layers (they
    cost more than the round trip itself). One retry on a broken connection."""

    def __init__(self, url: str) -> None:
        # Short socket timeouts: an unreachable Redis costs a request a moment, never a hang.
        self.pool = redis.ConnectionPool.from_url(
            url,
            socket_connect_timeout=OUTAGE_TIMEOUT_SECONDS,
            socket_timeout=OUTAGE_TIMEOUT_SECONDS,
        )
        self.local = threading.local()

    def _connection(self) -> "redis.connection.ConnectionInterface":
        connection = getattr(self.local, "connection", None)
        if connection is None or connection.pid != os.getpid():
            connection = self.local.connection = self.pool.make_connection()
        return connection

    def _command(self, *args: object) -> object:
        for attempt in (1, 2):
            connection = self._connection()
            try:
                connection.send_command(*args)
                return connection.read_response()
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                connection.disconnect()
                self.local.connection = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def get(self, key: str) -> int:
        value = self._command("GET", key)
        return int(value) if value is not None else 0  # type: ignore[call-overload]

    def add(self, key: str, amount: int, ttl: int) -> int:
        total = int(self._command("INCRBY", key, amount))  # type: ignore[call-overload]
        if total == amount:  # first count of this window: let the key expire after it
            self._command("EXPIRE", key, ttl)
        return total


@cache
def _redis(url: str) -> RedisCounter:
    return RedisCounter(url)


@dataclass
class _Window:
    number: int
    known_total: int = 0  # the shared total when this process last synced (or its own count)
    unsynced: int = 0  # calls this process answered since
    synced_at: float = 0.0


class WindowCounter:
    def __init__(self) -> None:
        self._windows: dict[str, _Window] = {}
        self._lock = threading.Lock()

    def hit(self, bucket: str, limit: int) -> RateLimitState:
        """Count one call against `bucket` and say where the window stands."""
        now = time.time()
        number = int(now // WINDOW_SECONDS)
        with self._lock:
            window = self._current(bucket, number)
            window.unsynced += 1
            if settings.REDIS_URL and self._must_sync(window, limit, now):
                self._sync(f"gshost:rl:{bucket}:{number}", window, now)
            count = window.known_total + window.unsynced
        return RateLimitState(limit, limit - count, (number + 1) * WINDOW_SECONDS)

    def peek(self, bucket: str, limit: int) -> RateLimitState:
        number = int(time.time() // WINDOW_SECONDS)
        with self._lock:
            window = self._windows.get(bucket)
            count = (
                window.known_total + window.unsynced if window and window.number == number else 0
            )
        return RateLimitState(limit, limit - count, (number + 1) * WINDOW_SECONDS)

    def total(self, bucket: str, number: int) -> int:
        """The count of window `number` of `bucket` as far as this process knows it: the shared
        total with Redis (plus what this process has not told it yet), else its own."""
        with self._lock:
            window = self._windows.get(bucket)
            local = window if window is not None and window.number == number else None
            own = local.known_total + local.unsynced if local is not None else 0
            unsynced = local.unsynced if local is not None else 0
        if not settings.REDIS_URL:
            return own
        try:
            shared = _redis(settings.REDIS_URL).get(f"gshost:rl:{bucket}:{number}")
        except (redis.RedisError, OSError):
            return own
        return max(own, shared + unsynced)

    def reset(self) -> None:
        with self._lock:
            self._windows.clear()

    @staticmethod
    def _sync(key: str, window: _Window, now: float) -> None:
        try:
            shared = _redis(settings.REDIS_URL).add(key, window.unsynced, WINDOW_SECONDS * 2)
        except (redis.RedisError, OSError):
            # Limits are protection, not billing: without Redis, count in this process alone
            # (fail open: the call is answered, never a 5xx).
            logger.warning("Rate-limit counter unavailable; counting locally", exc_info=True)
            return
        window.known_total, window.unsynced, window.synced_at = shared, 0, now

    def _current(self, bucket: str, number: int) -> _Window:
        window = self._windows.get(bucket)
        if window is None or window.number != number:
            if len(self._windows) > 100_000:  # old windows of idle keys: start afresh
                self._windows.clear()
            window = self._windows[bucket] = _Window(number)
        return window

    @staticmethod
    def _must_sync(window: _Window, limit: int, now: float) -> bool:
        left = limit - window.known_total
        return (
            window.unsynced * LOCAL_SHARE > left
            or now - window.synced_at >= SYNC_INTERVAL
            or window.known_total + window.unsynced >= limit
        )


counter = WindowCounter()
hit = counter.hit
peek = counter.peek
total = counter.total
reset = counter.reset


def _forget() -> None:
    counter.reset()
    parse_rate.cache_clear()
    _redis.cache_clear()


process_state.register(
    "gshost.api.rate_limits",
    bound="the current window of at most 100,001 buckets (all dropped past that); one Redis "
    "connection per thread of the one REDIS_URL in use; one parsed number per rate setting",
    reset=_forget,
)
