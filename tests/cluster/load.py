"""Steady API traffic for the fault tests: threads calling one route in a loop, each call
recorded with when it started and ended and how it was answered."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests

REQUEST_TIMEOUT = 15.0


@dataclass(frozen=True)
class Call:
    started: float  # time.monotonic()
    ended: float
    status: int | None  # None: no answer (connection reset, timeout)
    body: bytes = b""


@dataclass
class Traffic:
    """`clients` threads, each calling `call(session, n)` until stopped."""

    sessions: list[requests.Session]
    call: Callable[[requests.Session, int], requests.Response]
    calls: list[Call] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for session in self.sessions:
            thread = threading.Thread(target=self._run, args=(session,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def count(self) -> int:
        with self._lock:
            return len(self.calls)

    def wait_for_calls(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.count() < count:
            assert time.monotonic() < deadline, f"only {self.count()} calls in {timeout} s"
            time.sleep(0.05)

    def _run(self, session: requests.Session) -> None:
        number = 0
        while not self._stop.is_set():
            number += 1
            started = time.monotonic()
            try:
                response = self.call(session, number)
                call = Call(started, time.monotonic(), response.status_code, response.content)
            except requests.RequestException:
                call = Call(started, time.monotonic(), None)
            with self._lock:
                self.calls.append(call)
