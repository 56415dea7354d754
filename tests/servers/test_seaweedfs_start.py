"""The tests' S3 server starts even when a port it was given is taken before it binds it (as
another test part's connection once did, and SeaweedFS exited)."""

from __future__ import annotations

import socket
from typing import Any

from tests.servers import seaweedfs


def test_seaweedfs_starts_on_new_ports_when_one_it_was_given_is_taken(monkeypatch: Any) -> None:
    given: list[list[int]] = []
    pick = seaweedfs.free_port_pairs

    def ports_of_which_the_first_is_taken(count: int) -> list[int]:
        ports = pick(count)
        if not given:
            taker.bind(("127.0.0.1", ports[-1] + seaweedfs.PAIR_OFFSET))
            taker.listen()
        given.append(ports)
        return ports

    monkeypatch.setattr(seaweedfs, "free_port_pairs", ports_of_which_the_first_is_taken)
    with socket.socket() as taker:
        server = seaweedfs.SeaweedFS()
    try:
        bucket = server.new_bucket()
        server.write(bucket, "key", b"value")
        assert server.read(bucket, "key") == b"value"
        assert len(given) == 2
    finally:
        server.stop()
