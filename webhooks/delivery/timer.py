"""The engine's timer: one thread that wakes the work nobody queued.

Each round (``on_round``) offers what is due to the pool (retries, redeliveries, rows whose
task was lost, leases whose worker died) and answers how long until the next row falls due.
The timer then sleeps until that moment, never longer than ``poll`` seconds, so a retry starts
within about a poll of its due time at any moment of the worker's life, without a broker.

The thread is the engine's owner: it is not a daemon, and it ends when ``stop()`` is called
or when the process's main thread has finished (a django-q2 worker leaving its task loop, or
any interpreter shutting down), checked every ``WATCH_SECONDS``. On its way out it calls
``on_exit`` (the engine's orderly stop), so the process does not exit before that is done.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

logger = logging.getLogger(__name__)

POLL_SECONDS: Final = 1.0
WATCH_SECONDS: Final = 0.1
_ERROR_PAUSE_SECONDS: Final = 1.0


class Timer:
    def __init__(
        self,
        *,
        on_round: Callable[[], float | None],
        on_exit: Callable[[], None],
        poll: float = POLL_SECONDS,
        name: str = "webhook-timer",
        start: bool = True,
    ) -> None:
        """``start=False``: the owner calls ``start()`` once what ``on_round`` uses exists."""
        self._on_round = on_round
        self._on_exit = on_exit
        self._poll = poll
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.rounds = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=False)
        if start:
            self.start()

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Run a round now (new work may be due)."""
        self._wake.set()

    def stop(self, timeout: float | None = None) -> bool:
        """Ask the thread to end (it runs ``on_exit`` first); True once it has."""
        self._stop.set()
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            next_round = 0.0
            while self._keep_going():
                if self._wake.is_set() or time.monotonic() >= next_round:
                    self._wake.clear()
                    next_round = time.monotonic() + self._round()
                pause = min(WATCH_SECONDS, max(0.0, next_round - time.monotonic()))
                self._wake.wait(pause)
        finally:
            self._on_exit()

    def _keep_going(self) -> bool:
        return not self._stop.is_set() and threading.main_thread().is_alive()

    def _round(self) -> float:
        """Seconds until the next round."""
        self.rounds += 1
        try:
            until_due = self._on_round()
        except Exception:
            logger.exception("Webhook timer round failed")
            return _ERROR_PAUSE_SECONDS
        if until_due is None:
            return self._poll
        return max(0.0, min(self._poll, until_due))
