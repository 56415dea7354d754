"""The SFTP service's bound on open SSH connections (gshost_agent.sftp.logins.ConnectionGate):
beyond it, a new connection is closed before any login is tried."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncssh
import pytest

from gshost_agent.sftp.logins import ConnectionGate, SftpLogins


async def never_asked(body: dict[str, Any]) -> tuple[int, Any]:
    raise AssertionError("no login is asked of the control plane")


def test_the_gate_admits_up_to_its_limit_and_again_once_one_leaves():
    gate = ConnectionGate(2)
    assert [gate.admit(), gate.admit(), gate.admit()] == [True, True, False]
    gate.leave()
    assert gate.admit()


def test_a_connection_beyond_the_limit_is_closed_before_any_login():
    async def attempt() -> None:
        key = asyncssh.generate_private_key("ssh-ed25519")
        server = await asyncssh.create_server(
            lambda: SftpLogins(never_asked, ConnectionGate(0)), "127.0.0.1", 0,
            server_host_keys=[key],
        )  # fmt: skip
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises((asyncssh.Error, OSError)):
                await asyncssh.connect(
                    "127.0.0.1", port, username="a@b.srv_x", password="p", known_hosts=None,
                    client_keys=None,
                )  # fmt: skip
        finally:
            server.close()

    asyncio.run(attempt())
