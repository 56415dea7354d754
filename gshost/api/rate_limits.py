"""Fixed one-minute windows, counted in the cache (Redis in production, shared by every process).

600 quick calls pass and the 601st in the window is refused; the window then resets whole.
"""

import time
from dataclasses import dataclass

from django.core.cache import cache

WINDOW_SECONDS = 60


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


def parse_rate(rate: str) -> int:
    """`300/min` -> 300 (settings validate the shape at start-up)."""
    return int(rate.partition("/")[0])


def _window(now: float) -> tuple[int, int]:
    window = int(now // WINDOW_SECONDS)
    return window, (window + 1) * WINDOW_SECONDS


def _increment(key: str) -> int:
    client_getter = getattr(getattr(cache, "_cache", None), "get_client", None)
    if client_getter is not None:  # Redis: one round trip for both commands
        full_key = cache.make_and_validate_key(key)
        pipeline = client_getter(full_key, write=True).pipeline()
        pipeline.incr(full_key)
        pipeline.expire(full_key, WINDOW_SECONDS * 2)
        return int(pipeline.execute()[0])
    cache.add(key, 0, WINDOW_SECONDS * 2)
    return int(cache.incr(key))


def hit(bucket: str, limit: int) -> RateLimitState:
    """Count one request against `bucket` and say where the window stands."""
    window, reset_at = _window(time.time())
    count = _increment(f"rl:{bucket}:{window}")
    return RateLimitState(limit=limit, remaining=limit - count, reset_at=reset_at)


def peek(bucket: str, limit: int) -> RateLimitState:
    window, reset_at = _window(time.time())
    count = int(cache.get(f"rl:{bucket}:{window}") or 0)
    return RateLimitState(limit=limit, remaining=limit - count, reset_at=reset_at)
