"""Moving a server between two real agents (`servers.agents.transfers`), whose reports reach the
control plane served by the test (live_server). Whatever fails, the server is wholly on the
source or wholly on the target: its record, its files, and where it runs.

PostgreSQL only: the live server's thread and the test write the same rows at once, which the
in-memory SQLite test database cannot take ("database table is locked")."""

from __future__ import annotations

import os
import signal
import ssl
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import requests
from django.core.management import CommandError, call_command

from audit.actors import Actor
from servers import tasks
from servers.agents.transfers import (
    migration_to_node_begin,
    migration_to_node_run,
    migration_to_node_start,
)
from servers.errors import MigrationRefused
from servers.fleet.nodes import NodeInput, node_create
from servers.models import MigrationState, Node, Server, ServerState
from servers.readings import migration_status
from servers.services import PowerAction, server_create, server_power
from tests.agent.conftest import (
    Agent,
    AgentFactory,
    ControlPlane,
    certificates,
    games_dir,
)
from tests.agent.lines import wait_until
from tests.agent.test_transfers import small_disk, tree
from tests.ports import free_port, free_port_range
from tests.webhooks.worker_cluster import ON_POSTGRES

__all__ = ["certificates", "games_dir", "small_disk"]  # the agent tests' fixtures

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(os.geteuid() != 0, reason="the agents run as root, as in production"),
    pytest.mark.skipif(not ON_POSTGRES, reason="the live server needs PostgreSQL"),
]

ACTOR = Actor.system("test")
BIG_FILE_MB = 64


class Pair:
    """Two agent nodes, `a` and `b`, registered and reporting to the live server."""

    def __init__(self, factory: AgentFactory, certificates: dict[str, Path], url: str) -> None:
        self.factory, self.certificates, self.url = factory, certificates, url
        self.agents: dict[str, Agent] = {}

    def node(
        self, name: str, data_dir: Path | None = None, *, agent: Agent | None = None,
        url: str | None = None,
    ) -> Node:  # fmt: skip
        agent = agent or self.factory.make(data_dir)
        created = node_create(
            data=NodeInput(
                name=name,
                url=url or agent.url,
                address="127.0.0.1",
                ports=free_port_range(3),
                ca_pem=self.certificates["ca"].read_text(),
            )
        )
        agent.env["AGENT_TOKEN"] = created.token
        agent.env["AGENT_CONTROL_URL"] = self.url
        agent.start()
        self.agents[name] = agent
        wait_until(lambda: Node.objects.get(id=created.node.id).last_heartbeat_at, timeout=20)
        return Node.objects.get(id=created.node.id)

    def files(self, name: str, server: Server) -> dict[str, str] | None:
        directory = self.agents[name].data_dir / "servers" / server.id
        return tree(directory) if directory.exists() else None


@pytest.fixture
def pair(certificates, games_dir, live_server) -> Iterator[Pair]:
    factory = AgentFactory(certificates, games_dir, ControlPlane(port=free_port()))
    yield Pair(factory, certificates, live_server.url)
    factory.clean_up()


def state_of(server: Server) -> str:
    return Server.objects.get(id=server.id).state


def demo_on(node: Node, acme: Any, *, running: bool) -> Server:
    """A demo server that ran once on `node` (its files written), running or stopped."""
    server = server_create(
        actor=Actor.system("test"), organization=acme, name="Demo", game="demo", node=node
    )
    server_power(server=server, action=PowerAction.START, actor=ACTOR)
    wait_until(lambda: state_of(server) == ServerState.RUNNING, timeout=30)
    if not running:
        server_power(server=Server.objects.get(id=server.id), action=PowerAction.STOP, actor=ACTOR)
        wait_until(lambda: state_of(server) == ServerState.STOPPED, timeout=30)
    return Server.objects.get(id=server.id)


def with_big_file(pair: Pair, name: str, server: Server) -> None:
    path = pair.agents[name].data_dir / "servers" / server.id / "region.bin"
    with open(path, "wb") as big:
        for _ in range(BIG_FILE_MB):
            big.write(os.urandom(1024 * 1024))


def migrate(server: Server, target: Node) -> Any:
    begun = migration_to_node_begin(server=server, target=target, actor=ACTOR)
    return migration_to_node_run(migration_id=begun.id)


def assert_on_source(pair: Pair, server: Server, source: Node, before: dict[str, str]) -> None:
    after = Server.objects.get(id=server.id)
    assert (after.node_id, after.port, after.address) == (source.id, server.port, server.address)
    assert pair.files("a", server) == before
    assert pair.files("b", server) is None


def test_a_running_server_moves_with_its_files_and_runs_on_the_target(pair, acme, published):
    a, b = pair.node("a"), pair.node("b")
    server = demo_on(a, acme, running=True)
    (pair.agents["a"].data_dir / "servers" / server.id / "notes.txt").write_text("hello\n")
    migration = migrate(server, b)

    moved = Server.objects.get(id=server.id)
    assert migration.state == MigrationState.COMPLETED, migration.error
    assert moved.node_id == b.id and b.first_port <= moved.port <= b.last_port
    assert moved.address == f"127.0.0.1:{moved.port}" == migration.new_address
    assert pair.files("a", server) is None
    assert (
        pair.agents["b"].data_dir / "servers" / server.id / "notes.txt"
    ).read_text() == "hello\n"
    wait_until(lambda: state_of(server) == ServerState.RUNNING, timeout=30)
    migrated = [p for p in published if p.event == "server.migrated"]
    assert [p.data for p in migrated] == [
        {
            "previous_address": server.address,
            "new_address": moved.address,
            "port_changed": moved.port != server.port,
        }
    ]


def test_a_stopped_server_moves_byte_for_byte_and_stays_stopped(pair, acme):
    a, b = pair.node("a"), pair.node("b")
    server = demo_on(a, acme, running=False)
    before = pair.files("a", server)

    migration = migrate(server, b)

    assert migration.state == MigrationState.COMPLETED
    assert pair.files("b", server) == before and pair.files("a", server) is None
    assert state_of(server) == ServerState.STOPPED


def test_a_target_that_is_down_fails_the_move_and_the_server_runs_again_on_the_source(pair, acme):
    a, b = pair.node("a"), pair.node("b")
    server = demo_on(a, acme, running=True)
    pair.agents["b"].end(signal.SIGKILL)  # its last heartbeat is recent: still "online"

    migration = migrate(server, b)

    assert migration.state == MigrationState.FAILED
    assert "the target did not take it" in migration.error
    after = Server.objects.get(id=server.id)
    assert (after.node_id, after.port) == (a.id, server.port)
    wait_until(lambda: state_of(server) == ServerState.RUNNING, timeout=30)


class TamperingProxy:
    """The target's URL as the control plane and the source know it: HTTPS, forwarding every
    request to the real target agent, with one byte of every uploaded archive flipped."""

    def __init__(self, target: Agent, certificates: dict[str, Path]) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.forward()

            def do_PUT(self) -> None:
                self.forward()

            def do_DELETE(self) -> None:
                self.forward()

            def forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.command == "PUT" and body:
                    body = body[:100] + bytes([body[100] ^ 0xFF]) + body[101:]
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                answer = requests.request(
                    self.command, target.url + self.path, data=body, headers=headers,
                    verify=str(target.ca), timeout=60,
                )  # fmt: skip
                self.send_response(answer.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certificates["cert"], certificates["key"])
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=proxy.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_an_archive_changed_on_its_way_fails_the_move_and_nothing_reaches_the_target(
    pair, acme, certificates
):
    a = pair.node("a")
    target_agent = pair.factory.make()
    proxy = TamperingProxy(target_agent, certificates)
    try:
        b = pair.node("b", agent=target_agent, url=proxy.url)
        server = demo_on(a, acme, running=False)
        before = pair.files("a", server)

        migration = migrate(server, b)
    finally:
        proxy.close()

    assert migration.state == MigrationState.FAILED
    assert "SHA-256" in migration.error
    assert_on_source(pair, server, a, before)


def test_a_target_with_a_full_disk_fails_the_move(pair, acme, small_disk):
    a, b = pair.node("a"), pair.node("b", data_dir=small_disk)
    # Staff's figure for its disk, not the 2 MiB its machine says: the move begins, and the
    # disk fills while the data arrives.
    Node.objects.filter(id=b.id).update(disk_mb=102400)
    server = demo_on(a, acme, running=False)
    (pair.agents["a"].data_dir / "servers" / server.id / "noise.bin").write_bytes(
        os.urandom(4 * 1024 * 1024)
    )
    before = pair.files("a", server)

    migration = migrate(server, b)

    assert migration.state == MigrationState.FAILED
    assert "disk is full" in migration.error
    assert_on_source(pair, server, a, before)


@pytest.mark.parametrize("victim", ["a", "b"])
def test_an_agent_killed_mid_upload_fails_the_move_and_the_server_stays_on_the_source(
    pair, acme, victim
):
    a, b = pair.node("a"), pair.node("b")
    server = demo_on(a, acme, running=False)
    with_big_file(pair, "a", server)
    before = pair.files("a", server)
    partial = pair.agents["b"].data_dir / "transfers" / f"{server.id}.incoming.tar.gz"

    def kill_when_uploading() -> None:
        wait_until(lambda: partial.exists() and partial.stat().st_size > 0, 60, interval=0.01)
        pair.agents[victim].end(signal.SIGKILL)

    with ThreadPoolExecutor(max_workers=1) as pool:  # the move runs here: the test's database
        killing = pool.submit(kill_when_uploading)
        migration = migrate(server, b)
        killing.result(timeout=60)
    pair.agents[victim].start()

    assert migration.state == MigrationState.FAILED
    wait_until(lambda: not os.listdir(pair.agents["b"].data_dir / "transfers"), timeout=20)
    assert_on_source(pair, server, a, before)


def test_it_refuses_a_target_that_is_not_another_agent_node(pair, acme):
    a = pair.node("a")
    server = demo_on(a, acme, running=False)
    with pytest.raises(MigrationRefused):
        migration_to_node_begin(server=server, target=a, actor=ACTOR)


def test_simulate_migrate_moves_the_server_to_the_named_node(pair, acme):
    a, b = pair.node("a"), pair.node("b")
    server = demo_on(a, acme, running=False)
    out = StringIO()

    call_command("simulate", server.id, "migrate", "--node", "b", stdout=out)

    moved = Server.objects.get(id=server.id)
    assert moved.node_id == b.id
    assert f"to node b ({moved.address}); server.migrated fired" in out.getvalue()


def test_simulate_migrate_says_why_the_server_stayed(pair, acme):
    a = pair.node("a")
    pair.node("b")
    server = demo_on(a, acme, running=False)
    pair.agents["b"].end(signal.SIGKILL)

    with pytest.raises(CommandError, match="stays on node a: the target did not take it"):
        call_command("simulate", server.id, "migrate", "--node", "b")
    assert Server.objects.get(id=server.id).node_id == a.id


def test_a_move_begun_in_the_admin_is_done_by_the_workers_task(pair, acme):
    a, b = pair.node("a"), pair.node("b")
    server = demo_on(a, acme, running=False)
    begun = migration_to_node_start(server=server, target=b, actor=ACTOR)

    tasks.migration_to_node(begun.id)

    assert Server.objects.get(id=server.id).node_id == b.id
    assert migration_status(server)["state"] == "completed"
