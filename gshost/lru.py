"""A dictionary of at most `max_size` entries that drops the least recently used first: what
bounds a per-process cache keyed by something callers choose (key ids, addresses)."""

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

from gshost.errors import Misuse

K = TypeVar("K")
V = TypeVar("V")


class LruDict(Generic[K, V]):
    """Thread-safe: writes hold the lock; a read moves its entry to the end."""

    def __init__(self, max_size: int) -> None:
        if max_size < 1:
            raise Misuse("max_size must be at least 1")
        self.max_size = max_size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        # Without the lock: each OrderedDict operation is atomic, and an entry dropped by
        # another thread in between is simply a miss. Reads are the hot path (every API call).
        try:
            value = self._entries[key]
            self._entries.move_to_end(key)
        except KeyError:  # absent (a miss costs a database read anyway)
            return None
        return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_size:
                self._entries.popitem(last=False)

    def pop(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries
