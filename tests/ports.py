"""Free loopback ports for the processes that tests start.

They are picked below the kernel's ephemeral range (32768 and up), where a port probed free
stays free until the process binds it: an outgoing connection of another test part, which
takes ephemeral ports, cannot take it in between (one did, and SeaweedFS exited). Two parts
that pick at once can still meet, at odds of about 1 in 10,000.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Callable, Iterable, Iterator

SINGLE_PORTS = range(2_000, 12_000)
PAIRED_PORTS = range(12_000, 22_000)
PAIR_OFFSET = 10_000
"""A pair is a port of PAIRED_PORTS and the port PAIR_OFFSET above it (SeaweedFS's services
each take their port and their port + 10000 for gRPC); the twins lie in 22000-31999."""
FIXED_PORTS = {2022, 5432, 6379, 6432, 8000, 8080, 8443, 8444, 8445, 9000, 9444}
"""Ports that services or tests bind by number, never handed out."""


def free_port() -> int:
    return next(_free(SINGLE_PORTS, lambda port: [port]))


def free_port_range(size: int) -> str:
    """FIRST-LAST of `size` ports all free now (a node gives its servers these ports)."""
    first = next(_free(SINGLE_PORTS, lambda port: range(port, port + size)))
    return f"{first}-{first + size - 1}"


def free_port_pairs(count: int) -> list[int]:
    """`count` distinct ports that are free, and so are the ports PAIR_OFFSET above them."""
    free = _free(PAIRED_PORTS, lambda port: [port, port + PAIR_OFFSET])
    return [next(free) for _ in range(count)]


def _free(ports: range, taken_with: Callable[[int], Iterable[int]]) -> Iterator[int]:
    for port in random.sample(ports, len(ports)):
        wanted = list(taken_with(port))
        if FIXED_PORTS.isdisjoint(wanted) and all(map(_bindable, wanted)):
            yield port
    raise AssertionError(f"no free port in {ports}")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
