"""The game's network against a hostile game (the tests' `hostile` template, which runs the
probe each console line names) on a node in a network namespace of its own
(tests/agent/node_namespace.py): nothing of the node over IPv6, link-local included; no way
from an adjacent host into the node's loopback; another game only as its players reach it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from gshost_agent.netns import Slot
from gshost_agent.server_state import Intent
from tests.agent.conftest import AgentFactory
from tests.agent.control_plane import TOKEN, ControlPlane
from tests.agent.lines import probe
from tests.agent.node_namespace import NodeAgent, NodeNetwork, data_dir
from tests.ports import free_port


@pytest.fixture(scope="module")
def node() -> Iterator[NodeNetwork]:
    network = NodeNetwork()
    yield network
    network.close()


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


def issued(authority: trustme.CA, address: str, directory: Path) -> tuple[str, str]:
    """A certificate for `address` and its key, as files."""
    issue = authority.issue_cert(address)
    cert, key = directory / f"{address}.pem", directory / f"{address}.key"
    issue.cert_chain_pems[0].write_to_path(str(cert))
    issue.private_key_pem.write_to_path(str(key))
    return str(cert), str(key)


@pytest.fixture(scope="module")
def tls(authority: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    authority.cert_pem.write_to_path(str(directory / "ca.pem"))
    return directory


@pytest.fixture(scope="module")
def plane(node: NodeNetwork, authority: trustme.CA, tls: Path) -> Iterator[ControlPlane]:
    """The control plane on the machine's end of the node's link (HTTPS: it is not loopback)."""
    certificate = issued(authority, node.machine_address, tls)
    control_plane = ControlPlane(port=free_port(), address=node.machine_address, tls=certificate)
    control_plane.up()
    yield control_plane
    control_plane.down()


@pytest.fixture(scope="module")
def agent(node, plane, authority, tls, certificates, games_dir) -> Iterator[NodeAgent]:
    """The node's agent, started where an earlier agent left its rules and `route_localnet`."""
    node.as_an_earlier_agent_left_it()
    cert, key = issued(authority, node.address, tls)
    directory = data_dir()
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "AGENT_TOKEN": TOKEN,
        "AGENT_CONTROL_URL": plane.url,
        "AGENT_CONTROL_CA": str(tls / "ca.pem"),
        "AGENT_DATA_DIR": str(directory),
        "AGENT_BIND": f"{node.address}:{free_port()}",
        "AGENT_TLS_CERT": cert,
        "AGENT_TLS_KEY": key,
        "AGENT_GAMES_DIR": str(games_dir),
        "AGENT_NETWORK_POOL": "2",
    }
    port = int(env["AGENT_BIND"].rsplit(":", 1)[1])
    started = NodeAgent(node=node, data_dir=directory, env=env, port=port, ca=tls / "ca.pem")
    factory = AgentFactory(certificates, games_dir, plane)
    factory.agents.append(started)
    started.start()
    assert started.request("GET", "/v1/node").json()["isolation"].startswith("sandboxed")
    yield started
    factory.clean_up()


def hostile(agent: NodeAgent, plane: ControlPlane) -> tuple[str, int]:
    server_id, port = agent.start_server("hostile")
    plane.wait_for_report(server_id, "ready")
    return server_id, port


def slot_of(agent: NodeAgent, server_id: str) -> Slot:
    """The game's network, as its agent noted it."""
    intent = Intent.load(agent.run_dir(server_id))
    assert intent is not None and intent.network is not None
    return Slot(intent.network[0])


def link_local(mac: str) -> str:
    """The EUI-64 link-local address the kernel gives a link with this MAC by default."""
    octets = [int(part, 16) for part in mac.split(":")]
    octets[0] ^= 0x02
    eui = [*octets[:3], 0xFF, 0xFE, *octets[3:]]
    groups = [f"{eui[i] << 8 | eui[i + 1]:x}" for i in range(0, 8, 2)]
    return "fe80::" + ":".join(groups)


def test_a_game_cannot_reach_the_node_over_ipv6_at_its_link_local_address(agent, plane, node):
    attacker, _ = hostile(agent, plane)
    slot = slot_of(agent, attacker)
    mac = node.ip("-o", "link", "show", slot.host_link).split("link/ether ")[1].split()[0]
    node_end = f"{link_local(mac)}%{slot.game_link}"
    with node.listening("::") as port:
        assert probe(agent, attacker, f"connect {node_end} {port}").startswith("failed")
    assert "inet6" not in node.ip("addr", "show", "dev", slot.host_link)


def test_an_adjacent_host_cannot_reach_a_service_on_the_nodes_loopback(agent, node):
    node.add_neighbour()
    with node.listening("127.0.0.1") as port:
        assert node.connect_from_node("127.0.0.1", port) == "answered NODE"
        assert node.connect_from_neighbour("127.0.0.1", port).startswith("failed")


def test_route_localnet_is_off_for_all_interfaces_while_games_run(agent, plane, node):
    hostile(agent, plane)
    assert node.sysctl("net.ipv4.conf.all.route_localnet") == "0"


def test_a_player_on_the_nodes_loopback_still_reaches_its_game(agent, plane, node):
    server_id, port = agent.start_server("demo")
    plane.wait_for_report(server_id, "ready")
    assert node.connect_from_node("127.0.0.1", port, "JOIN alice\n") == "answered WELCOME alice"


def test_a_game_reaches_another_game_only_at_the_nodes_address_on_its_forwarded_port(
    agent, plane, node
):
    attacker, _ = hostile(agent, plane)
    victim, forwarded = hostile(agent, plane)
    unforwarded = forwarded + 1 if forwarded < 65535 else forwarded - 1
    assert probe(agent, victim, f"bind {forwarded}") == "bound"
    assert probe(agent, victim, f"bind {unforwarded}") == "bound"
    victim_address = slot_of(agent, victim).game_address
    for host, port in [
        (victim_address, unforwarded),
        (victim_address, forwarded),
        (node.address, unforwarded),
    ]:
        assert probe(agent, attacker, f"connect {host} {port}").startswith("failed"), (host, port)
    assert probe(agent, attacker, f"connect {node.address} {forwarded}") == "connected"


def test_a_game_still_reaches_other_hosts(agent, plane, node):
    attacker, _ = hostile(agent, plane)
    with socket.create_server((node.machine_address, 0)) as other_host:
        port = other_host.getsockname()[1]
        assert probe(agent, attacker, f"connect {node.machine_address} {port}") == "connected"


def test_a_new_agent_keeps_the_loopback_players_of_games_an_earlier_agent_started(
    agent, plane, node
):
    server_id, port = agent.start_server("demo")
    plane.wait_for_report(server_id, "ready")
    agent.end()  # its games keep running, with their keepers
    link = slot_of(agent, server_id).host_link
    node.sysctl(f"net.ipv4.conf.{link}.route_localnet", "0")  # as an earlier agent made it
    node.sysctl("net.ipv4.conf.all.route_localnet", "1")
    agent.start()
    assert node.sysctl("net.ipv4.conf.all.route_localnet") == "0"
    assert node.connect_from_node("127.0.0.1", port, "JOIN bob\n") == "answered WELCOME bob"
