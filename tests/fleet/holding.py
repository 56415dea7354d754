"""A listener that accepts TCP connections and never answers: a node's API behind a proxy that
holds every connection. It counts the connections it took."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest


class HoldingListener:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._socket = socket.create_server((host, port))
        self._socket.settimeout(0.2)  # the accept loop looks at `_stopped` this often
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.took_one = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._held)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._held.append(connection)
            self.took_one.set()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        self._socket.close()
        with self._lock:
            for connection in self._held:
                connection.close()


@pytest.fixture
def holding_listener() -> Iterator[HoldingListener]:
    listener = HoldingListener()
    try:
        yield listener
    finally:
        listener.stop()
