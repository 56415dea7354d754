"""Database connections of the engine's long-lived threads (the dispatcher, the recorder,
the timer): each keeps its own, checked at most once a second."""

from __future__ import annotations

import threading
import time
from typing import Final

from django.db import close_old_connections

_CONNECTION_CHECK_SECONDS: Final = 1.0
_thread_state = threading.local()


def refresh_connection() -> None:
    """Drop this thread's connection if broken or too old, at most once a second.

    Each check makes the next query ping the server first (CONN_HEALTH_CHECKS), which would
    cost a round trip per batch if done every time.
    """
    now = time.monotonic()
    if now - getattr(_thread_state, "checked_at", 0.0) >= _CONNECTION_CHECK_SECONDS:
        _thread_state.checked_at = now
        close_old_connections()
