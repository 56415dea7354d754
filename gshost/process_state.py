"""Every piece of state a process keeps outside the database, declared in one place.

Caches, buffers and threads register here with what bounds them and how to drop them, so
the whole list can be read (``registered()``) and one call (``reset_all()``) gives tests, and
a freshly forked worker, a process with nothing left over. A module registers at import time:

    process_state.register("accounts.key_records", bound="1,000 keys", reset=forget_all)
"""

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessState:
    name: str
    bound: str
    reset: Callable[[], None]


_registry: dict[str, ProcessState] = {}


def register(name: str, *, bound: str, reset: Callable[[], None]) -> None:
    """Declare a per-process cache or thread. Registering a name again replaces it, so a
    module reloaded in a test does not leave a stale reset behind."""
    _registry[name] = ProcessState(name=name, bound=bound, reset=reset)


def registered() -> list[ProcessState]:
    return sorted(_registry.values(), key=lambda state: state.name)


def reset_all() -> None:
    """Drop every registered piece of process state, in name order."""
    for state in registered():
        state.reset()
