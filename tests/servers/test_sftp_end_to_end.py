"""SFTP end to end: a real agent serving SFTP, whose every login is asked of the real control
plane (gunicorn, `POST /api/node/v1/sftp-auth`), with asyncssh as the client. A password
change in the panel ends the open session; a server of another node is refused. PostgreSQL
and Redis only (tests/servers/agent_rig.py says why); the agent runs as root."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import asyncssh
import pytest
from django.test import Client

from accounts.models import Membership, Organization
from audit.actors import Actor
from audit.models import AuditRecord
from servers.models import Node, Server
from servers.services import server_create
from tests.agent.conftest import Agent, AgentFactory, certificates, games_dir
from tests.ports import free_port
from tests.servers.agent_rig import Web, register_agent_node, wait_until
from tests.servers.node_fixtures import register
from tests.webhooks.delivery_fixtures import HOST
from tests.webhooks.receiver import HttpsReceiver
from tests.webhooks.worker_cluster import needs_postgres_and_redis

__all__ = ["certificates", "games_dir"]  # the agent tests' fixtures, used here too

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    needs_postgres_and_redis,
    pytest.mark.skipif(os.geteuid() != 0, reason="the agent runs as root, as in production"),
]

_T = TypeVar("_T")


@pytest.fixture(scope="module")
def web(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Web]:
    with HttpsReceiver(names=(HOST,)) as receiver, django_db_blocker.unblock():
        started = Web(receiver, tmp_path_factory.mktemp("sftp-e2e"))
        yield started
        started.stop()


@pytest.fixture
def node_and_agent(
    db: None, certificates: dict[str, Path], games_dir: Path, web: Web
) -> Iterator[tuple[Node, Agent]]:
    factory = AgentFactory(certificates, games_dir, web)  # type: ignore[arg-type]
    node, agent, _token = register_agent_node(factory, certificates, web)
    agent.env["AGENT_SFTP_PORT"] = str(free_port())
    agent.start()
    wait_until(
        lambda: Node.objects.get(id=node.id).sftp_host_key_fingerprint, 20, "the SFTP host key"
    )
    yield node, agent
    factory.clean_up()


def sftp(agent: Agent, username: str, work: Callable[[asyncssh.SFTPClient], Awaitable[_T]],
         **credentials: Any) -> _T:  # fmt: skip
    async def session() -> _T:
        async with (
            asyncssh.connect(
                "127.0.0.1", int(agent.env["AGENT_SFTP_PORT"]), username=username,
                known_hosts=None, **{"client_keys": None, **credentials},
            ) as connection,
            connection.start_sftp_client() as client,
        ):  # fmt: skip
            return await work(client)

    return asyncio.run(session())


def demo_server(organization: Organization, node: Node) -> Server:
    return server_create(
        actor=Actor.system("test"), organization=organization, name="Demo", game="demo", node=node
    )


def test_a_person_logs_in_with_the_panel_password_and_the_login_is_audited(
    alice: Membership, node_and_agent: tuple[Node, Agent]
) -> None:
    node, agent = node_and_agent
    server = demo_server(alice.organization, node)
    username = f"alice@acme.test.{server.id}"

    async def upload(client: asyncssh.SFTPClient) -> list[str]:
        async with client.open("/hello.txt", "wb") as file:
            await file.write(b"hello\n")
        return sorted(await client.listdir("/"))

    assert "hello.txt" in sftp(agent, username, upload, password="alice-pw-123")
    assert (agent.data_dir / "servers" / server.id / "hello.txt").read_bytes() == b"hello\n"
    row = AuditRecord.objects.get(action="files.sftp_login", server_id=server.id)
    assert (row.source, row.actor_email, row.ip) == ("sftp", "alice@acme.test", "127.0.0.1")


def test_changes_made_over_sftp_are_audited_with_source_sftp(
    alice: Membership, node_and_agent: tuple[Node, Agent]
) -> None:
    node, agent = node_and_agent
    server = demo_server(alice.organization, node)

    async def change(client: asyncssh.SFTPClient) -> None:
        await client.mkdir("/mods")
        async with client.open("/mods/a.txt", "wb") as file:
            await file.write(b"alpha\n")
        await client.rename("/mods/a.txt", "/mods/b.txt")
        await client.remove("/mods/b.txt")

    sftp(agent, f"alice@acme.test.{server.id}", change, password="alice-pw-123")

    def audited() -> list[tuple[str, str]] | None:
        rows = AuditRecord.objects.filter(server_id=server.id, source="sftp").order_by(
            "occurred_at"
        )
        found = [(row.action, row.details) for row in rows.exclude(action="files.sftp_login")]
        return found if len(found) == 4 else None

    assert wait_until(audited, 20, "the SFTP changes audited") == [
        ("files.directory", '{"path": "/mods"}'),
        ("files.write", '{"path": "/mods/a.txt"}'),
        ("files.rename", '{"from": "/mods/a.txt", "to": "/mods/b.txt"}'),
        ("files.delete", '{"paths": ["/mods/b.txt"]}'),
    ]
    assert set(AuditRecord.objects.filter(source="sftp").values_list("actor_email", flat=True)) == {
        "alice@acme.test"
    }


def test_a_person_logs_in_with_an_ssh_key_added_in_the_panel(
    alice: Membership, node_and_agent: tuple[Node, Agent]
) -> None:
    node, agent = node_and_agent
    server = demo_server(alice.organization, node)
    key = asyncssh.generate_private_key("ssh-ed25519")
    browser = Client()
    browser.force_login(alice.user)
    public = key.export_public_key("openssh").decode()
    assert (
        browser.post("/accounts/ssh-keys/", {"name": "laptop", "public_key": public}).status_code
        == 302
    )
    listed = sftp(agent, f"alice@acme.test.{server.id}", lambda c: c.listdir("/"),
                  client_keys=[key], password=None)  # fmt: skip
    assert listed is not None
    assert AuditRecord.objects.filter(action="files.sftp_login", server_id=server.id).count() == 1


def test_a_password_change_ends_the_open_session_within_5_seconds(
    alice: Membership, node_and_agent: tuple[Node, Agent]
) -> None:
    node, agent = node_and_agent
    server = demo_server(alice.organization, node)
    browser = Client()
    browser.force_login(alice.user)

    async def held(client: asyncssh.SFTPClient) -> str:
        await client.listdir("/")
        changed = await asyncio.to_thread(
            browser.post,
            "/accounts/security/password/",
            {"old_password": "alice-pw-123", "new_password1": "n3w-pw-4-alice!",
             "new_password2": "n3w-pw-4-alice!"},
        )  # fmt: skip
        assert changed.status_code == 302
        try:
            for _ in range(100):  # 5 s
                await client.listdir("/")
                await asyncio.sleep(0.05)
        except (asyncssh.Error, OSError) as error:
            return type(error).__name__
        return "still open"

    assert (
        sftp(agent, f"alice@acme.test.{server.id}", held, password="alice-pw-123") != "still open"
    )
    with pytest.raises(asyncssh.PermissionDenied):  # and the old password no longer opens one
        sftp(agent, f"alice@acme.test.{server.id}", lambda c: c.listdir("/"),
             password="alice-pw-123")  # fmt: skip


def test_a_server_on_another_node_is_refused(
    alice: Membership, node_and_agent: tuple[Node, Agent]
) -> None:
    _, agent = node_and_agent
    other_node, _ = register("node-other", url="https://127.0.0.1:1", address="198.51.100.9")
    server = demo_server(alice.organization, other_node)
    with pytest.raises(asyncssh.PermissionDenied):
        sftp(agent, f"alice@acme.test.{server.id}", lambda c: c.listdir("/"),
             password="alice-pw-123")  # fmt: skip
