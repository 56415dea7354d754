"""The many-nodes rig cleans up after itself, and after a run killed before its teardown."""

import subprocess
import sys

import pytest

from tests.fleet.netns import Network, can_make_namespaces, run

pytestmark = pytest.mark.skipif(not can_make_namespaces(), reason="network namespaces need root")


def names() -> str:
    return run("ip", "netns", "list").stdout + run("ip", "-o", "link", "show").stdout


def test_a_network_removes_its_namespaces_links_and_bridge_when_closed() -> None:
    network = Network()
    hosts = network.add_hosts(2)
    network.close()
    left = names()
    assert all(h.namespace not in left and h.host_link not in left for h in hosts)
    assert network.bridge not in left


def test_a_new_network_removes_what_a_killed_run_left() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    namespace, link = f"gsf{gone.pid}-0", f"gf{gone.pid}br"
    run("ip", "netns", "add", namespace)
    run("ip", "link", "add", link, "type", "bridge")
    network = Network()
    try:
        left = names()
        assert namespace not in left
        assert link not in left
    finally:
        network.close()
        run("ip", "netns", "del", namespace, check=False)
        run("ip", "link", "del", link, check=False)
