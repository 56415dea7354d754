"""A node in a network namespace of its own, for tests of the games' network (root only).

The node `gsnet<pid>n` has a veth to the machine (`gsnet<pid>m`: the machine 10.204.<k>.1, the
node 10.204.<k>.2) and, when a test asks, an adjacent host `gsnet<pid>b` on a second veth (the
node's end `neighbour` 10.204.<k>.5, the host .6). A real agent runs in the node
(`NodeAgent`); its sysctls and packet rules are the node's own, whatever agents of other
checkouts do on this machine meanwhile. Names carry the test process's id: a run removes what
a killed earlier run left, never another run's.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil

from tests.agent.conftest import Agent
from tests.agent.lines import LineReader

UPLINK = "uplink"  # the node's (and the adjacent host's) link to the machine, inside
_OURS = re.compile(r"^gsnet(?P<pid>\d+)[nmbr]$")

# What an agent of the round before left on its node: its chains, and every game reaching every
# other game's ports (FORWARD ... ACCEPT); `route_localnet` on for all interfaces.
EARLIER_AGENTS_RULES = """*nat
:GSHOST-DNAT - [0:0]
:GSHOST-SNAT - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j GSHOST-DNAT
-A OUTPUT -m addrtype --dst-type LOCAL -j GSHOST-DNAT
-A POSTROUTING -j GSHOST-SNAT
-A GSHOST-SNAT -s 127.0.0.0/8 -d 100.72.0.0/16 -j MASQUERADE
-A GSHOST-SNAT -s 100.72.0.0/16 ! -d 100.72.0.0/16 -j MASQUERADE
COMMIT
*filter
:GSHOST-IN - [0:0]
-A INPUT -i gshh+ -j GSHOST-IN
-A FORWARD -s 100.72.0.0/16 -j ACCEPT
-A FORWARD -d 100.72.0.0/16 -j ACCEPT
-A GSHOST-IN -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A GSHOST-IN -j DROP
COMMIT
"""

# Listens on argv[1] (any free port, printed), answers each connection "NODE".
LISTENER = """
import socket, sys
host = sys.argv[1]
family = socket.AF_INET6 if ":" in host else socket.AF_INET
listener = socket.create_server((host, 0), family=family)
print(listener.getsockname()[1], flush=True)
while True:
    client, _ = listener.accept()
    client.sendall(b"NODE\\n")
    client.close()
"""
# Connects to argv[1]:argv[2], sends argv[3] (if any) and prints the line answered, or why not.
CLIENT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3) as connection:
        connection.sendall(sys.argv[3].encode() if len(sys.argv) > 3 else b"")
        print("answered " + connection.makefile().readline().strip())
except OSError as error:
    print(f"failed {type(error).__name__}")
"""


def run(*command: str, stdin: str | None = None) -> str:
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, check=True, timeout=30
    ).stdout


class NodeNetwork:
    def __init__(self) -> None:
        remove_leftovers()
        tag = os.getpid()
        self.namespace, self.machine_link, self.neighbour = (f"gsnet{tag}{e}" for e in "nmb")
        block = f"10.204.{tag % 250 + 1}"
        self.machine_address, self.address = f"{block}.1", f"{block}.2"
        self.neighbour_gateway, self.neighbour_address = f"{block}.5", f"{block}.6"
        run("ip", "netns", "add", self.namespace)
        run("ip", "link", "add", self.machine_link, "type", "veth", "peer", "name", UPLINK,
            "netns", self.namespace)  # fmt: skip
        run("ip", "addr", "add", f"{self.machine_address}/30", "dev", self.machine_link)
        run("ip", "link", "set", self.machine_link, "up")
        self.ip("addr", "add", f"{self.address}/30", "dev", UPLINK)
        self.ip("link", "set", UPLINK, "up")
        self.ip("link", "set", "lo", "up")
        self.ip("route", "add", "default", "via", self.machine_address)

    @property
    def path(self) -> str:
        return f"/run/netns/{self.namespace}"

    def ip(self, *arguments: str) -> str:
        return run("ip", "-n", self.namespace, *arguments)

    def inside(self, *command: str) -> list[str]:
        """`command` run in the node's network namespace."""
        return ["nsenter", f"--net={self.path}", *command]

    def sysctl(self, name: str, value: str | None = None) -> str:
        assignment = name if value is None else f"{name}={value}"
        return run(*self.inside("sysctl", "-n", *(["-w"] if value else []), assignment)).strip()

    def as_an_earlier_agent_left_it(self) -> None:
        self.sysctl("net.ipv4.conf.all.route_localnet", "1")
        self.sysctl("net.ipv4.ip_forward", "1")
        run(*self.inside("iptables-restore", "-w", "--noflush"), stdin=EARLIER_AGENTS_RULES)

    def connect_from_node(self, host: str, port: int, send: str = "") -> str:
        """What a client on the node hears at host:port (`answered <line>` or `failed ...`)."""
        return run(*self.inside(sys.executable, "-c", CLIENT, host, str(port), send)).strip()

    @contextlib.contextmanager
    def listening(self, host: str) -> Iterator[int]:
        """A service of the node's on `host` (any free port, yielded) while the block runs."""
        command = self.inside(sys.executable, "-c", LISTENER, host)
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as listener:
            try:
                assert listener.stdout is not None
                yield int(LineReader(listener.stdout).wait_for(r"^\d+$", timeout=10))
            finally:
                listener.kill()

    def add_neighbour(self) -> None:
        """An adjacent host whose route to 127.0.0.0/8 is the node (its own loopback down)."""
        run("ip", "netns", "add", self.neighbour)
        self.ip("link", "add", "neighbour", "type", "veth", "peer", "name", UPLINK,
                "netns", self.neighbour)  # fmt: skip
        self.ip("addr", "add", f"{self.neighbour_gateway}/30", "dev", "neighbour")
        self.ip("link", "set", "neighbour", "up")
        run(
            "ip", "-n", self.neighbour, "addr", "add", f"{self.neighbour_address}/30", "dev", UPLINK
        )
        run("ip", "-n", self.neighbour, "link", "set", UPLINK, "up")
        run(
            "ip", "-n", self.neighbour, "route", "add", "127.0.0.0/8", "via", self.neighbour_gateway
        )

    def connect_from_neighbour(self, host: str, port: int) -> str:
        command = ["nsenter", f"--net=/run/netns/{self.neighbour}", sys.executable, "-c", CLIENT]
        return run(*command, host, str(port)).strip()

    def close(self) -> None:
        for namespace in (self.neighbour, self.namespace):  # their links go with them
            subprocess.run(["ip", "netns", "delete", namespace], capture_output=True, check=False)
        subprocess.run(["ip", "link", "delete", self.machine_link], capture_output=True)


def remove_leftovers() -> None:
    """Namespaces and links of runs whose process is gone."""
    namespaces = [line.split()[0] for line in run("ip", "netns", "list").splitlines()]
    links = [line.split(":")[1].strip() for line in run("ip", "-o", "link").splitlines()]
    for name in [*namespaces, *(link.split("@")[0] for link in links)]:
        match = _OURS.match(name)
        if match is None or psutil.pid_exists(int(match["pid"])):
            continue
        kind = "link" if name.endswith("m") else "netns"
        subprocess.run(["ip", kind, "delete", name], capture_output=True, check=False)


class NodeAgent(Agent):
    """A real agent in the node's network namespace, listening on the node's address."""

    def __init__(self, *, node: NodeNetwork, **agent: object) -> None:
        super().__init__(**agent)  # type: ignore[arg-type]
        self.node = node

    @property
    def url(self) -> str:
        return f"https://{self.node.address}:{self.port}"

    def command(self, python: str, *arguments: str) -> list[str]:
        return self.node.inside(python, "-m", "gshost_agent", *arguments)


def data_dir() -> Path:
    directory = Path(tempfile.mkdtemp(prefix="gshost-agent-", dir="/tmp"))
    os.chmod(directory, 0o711)
    return directory
