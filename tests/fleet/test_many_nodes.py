"""Twenty nodes, each a host of its own (a network namespace, its own address), running the
real agent and a real demo game, reporting to the control plane served by gunicorn with sync
workers: a node whose link is cut, one whose API holds connections, and the others.

PostgreSQL, Redis and root only (tests/fleet/rig.py says why).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from accounts.models import Organization
from audit.actors import Actor
from servers.models import Node, NodeState, Server, ServerState, ServerTransition
from servers.services import PowerAction, server_create, server_power
from tests.fleet.netns import Network, can_make_namespaces
from tests.fleet.rig import Certificates, FleetAgent, FleetWeb, start_agents, wait_until
from tests.webhooks.worker_cluster import needs_postgres_and_redis

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    needs_postgres_and_redis,
    pytest.mark.skipif(not can_make_namespaces(), reason="network namespaces need root"),
]

NODES = 20
WEB_WORKERS = 4
ACTOR = Actor.system("fleet test")


@dataclass
class Fleet:
    network: Network
    agents: list[FleetAgent]
    servers: list[Server]  # one demo server per node, running


@pytest.fixture(scope="module")
def certificates() -> Iterator[Certificates]:
    made = Certificates()
    yield made
    made.remove()


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    made = Network()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def web(
    django_db_setup: None,
    django_db_blocker: Any,
    network: Network,
    certificates: Certificates,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[FleetWeb]:
    with django_db_blocker.unblock():
        started = FleetWeb(network, certificates, tmp_path_factory.mktemp("fleet"), WEB_WORKERS)
    yield started
    started.stop()


@pytest.fixture
def fleet(
    acme: Organization, network: Network, certificates: Certificates, web: FleetWeb
) -> Iterator[Fleet]:
    hosts = network.add_hosts(NODES)
    agents: list[FleetAgent] = []
    try:
        start_agents(hosts, certificates, web, agents)
        wait_until(lambda: all(online(a.node) for a in agents), 30, "every node's heartbeat")
        servers = [
            server_create(
                actor=Actor.system("test"),
                organization=acme,
                name=f"demo-{n}",
                game="demo",
                node=agent.node,
            )
            for n, agent in enumerate(agents)
        ]
        for server in servers:
            server_power(server=server, action=PowerAction.START, actor=ACTOR)
        wait_until(lambda: all(running(s) for s in servers), 60, "every demo game to run")
        yield Fleet(network, agents, servers)
    finally:
        for agent in agents:
            agent.clean_up()
        network.remove_hosts(hosts)


@pytest.fixture
def power_key(make_key: Any) -> str:
    return str(make_key(["servers:power"]).full_key)


def online(node: Node) -> bool:
    return Node.objects.get(id=node.id).state() == NodeState.ONLINE


def running(server: Server) -> bool:
    return Server.objects.get(id=server.id).state == ServerState.RUNNING


def power(web: FleetWeb, key: str, server: Server, action: str = "stop") -> Any:
    return web.api(key, "POST", f"/servers/{server.id}/power", {"action": action})


def stop(web: FleetWeb, key: str, server: Server) -> Any:
    return power(web, key, server)


def power_all(web: FleetWeb, key: str, asked: list[tuple[Server, str]]) -> list[Any]:
    """Power actions asked at the same moment, one caller each."""
    with ThreadPoolExecutor(max_workers=len(asked)) as pool:
        return list(pool.map(lambda one: power(web, key, *one), asked))


def stop_all(web: FleetWeb, key: str, servers: list[Server]) -> list[Any]:
    return power_all(web, key, [(server, "stop") for server in servers])


def test_new_servers_spread_over_the_twenty_nodes(fleet: Fleet) -> None:
    for n in range(2 * NODES):
        call_command("createserver", "acme", f"spread-{n}", "--game", "demo", stdout=StringIO())
    per_node = Counter(Server.objects.values_list("node__name", flat=True))
    assert per_node == {agent.node.name: 3 for agent in fleet.agents}  # one from the fixture


def test_a_node_whose_link_is_cut_is_unreachable_within_30_s_then_answers_503_at_once(
    fleet: Fleet, web: FleetWeb, power_key: str
) -> None:
    cut = fleet.agents[0]
    fleet.network.cut(cut.host)
    wait_until(lambda: not online(cut.node), 30, "the node to be unreachable", interval=0.5)
    assert all(online(agent.node) for agent in fleet.agents[1:])
    response = stop(web, power_key, fleet.servers[0])
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "node_unavailable"
    assert "no heartbeat" in response.json()["error"]["message"]  # the node was not called
    assert int(response.headers["Retry-After"]) > 0
    assert running(fleet.servers[0])  # nothing was done


def test_a_cut_link_hangs_no_call_about_the_other_nodes_servers(
    fleet: Fleet, web: FleetWeb, power_key: str
) -> None:
    fleet.network.cut(fleet.agents[0].host)
    answers = stop_all(web, power_key, fleet.servers)
    assert answers[0].status_code == 503
    assert [answer.status_code for answer in answers[1:]] == [202] * (NODES - 1)


def test_once_the_link_is_back_its_reports_arrive_once_and_in_order(
    fleet: Fleet, acme: Organization
) -> None:
    agent = fleet.agents[0]
    first = fleet.servers[0]
    second = server_create(
        actor=Actor.system("test"), organization=acme, name="demo-b", game="demo", node=agent.node
    )
    server_power(server=second, action=PowerAction.START, actor=ACTOR)
    wait_until(lambda: running(second), 60, "the second game to run")
    fleet.network.cut(agent.host)
    for number, server in enumerate([first, second], start=1):
        os.kill(agent.game_pid(server.id), signal.SIGKILL)
        wait_until(lambda n=number: agent.pending_reports() >= n, 30, "the crash in the outbox")
    assert running(first) and running(second)  # nothing has arrived yet
    fleet.network.restore(agent.host)
    wait_until(lambda: agent.pending_reports() == 0, 30, "the outbox to be acknowledged")
    crashes = ServerTransition.objects.filter(server__in=[first, second], trigger="crash")
    assert [crash.server_id for crash in crashes.order_by("id")] == [first.id, second.id]


def test_a_node_that_holds_connections_costs_one_caller_and_other_nodes_callers_nothing(
    fleet: Fleet, web: FleetWeb, power_key: str, acme: Organization
) -> None:
    held = fleet.agents[0]
    on_held = [
        server_create(
            actor=Actor.system("test"),
            organization=acme,
            name=f"held-{n}",
            game="demo",
            node=held.node,
        )
        for n in range(4)
    ]
    proxy = HoldingProxy(held.host.command, held.host.address)
    try:
        Node.objects.filter(id=held.node.id).update(url=proxy.url)
        asked = [(server, "start") for server in on_held]
        answers = power_all(web, power_key, asked + [(s, "stop") for s in fleet.servers[1:]])
        assert [answer.status_code for answer in answers[:4]] == [503] * 4
        assert [answer.status_code for answer in answers[4:]] == [202] * (NODES - 1)
    finally:
        proxy.stop()
    assert proxy.connections == 1
    assert all(Server.objects.get(id=s.id).state == ServerState.STOPPED for s in on_held)


HOLDING = """
import socket, sys
listener = socket.create_server((sys.argv[1], 0))
print(listener.getsockname()[1], flush=True)
held = []
while True:
    connection, _ = listener.accept()
    held.append(connection)
    print("connection", flush=True)
"""


class HoldingProxy:
    """In the node's namespace, on its address: takes connections, never answers."""

    def __init__(self, command: Any, address: str) -> None:
        self.process = subprocess.Popen(
            command(sys.executable, "-I", "-c", HOLDING, address),
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.url = f"https://{address}:{int(self.process.stdout.readline())}"
        self.connections = 0

    def stop(self) -> None:
        """Ends it; `connections` is then how many it took."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        assert self.process.stdout is not None
        self.connections = self.process.stdout.read().split().count("connection")
