"""Hosts of their own on one machine: a bridge per cluster and a network namespace per host.

Cluster `k` owns the bridge `gsc<k>` with the subnet 10.210.<k>.0/24; the machine itself is
10.210.<k>.1 on it (the load balancer, PgBouncer and Redis listen there), host `n` of the
cluster is 10.210.<k>.<n> in the namespace `gshost-c<k>-<name>`. The owner's pid is written
beside the bridge's name, so a cluster whose owner died is cleaned up by the next one.

Inside every host the name `machine.gshost-cluster.example` is the machine itself
(/etc/netns/<namespace>/hosts, which `ip netns exec` puts in place of /etc/hosts): a webhook
receiver of a test or a benchmark listens there under a name a webhook URL may use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SUBNET_PREFIX = "10.210"
OWNERS_DIR = Path("/run/gshost-cluster")
NETNS_ETC = Path("/etc/netns")
MACHINE_NAME = "machine.gshost-cluster.example"
MAX_CLUSTERS = 250


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _owner_alive(index: int) -> bool:
    try:
        pid = int((OWNERS_DIR / f"gsc{index}.pid").read_text())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _remove_leftovers(index: int) -> None:
    """A cluster whose owner was killed left its namespaces and bridge behind."""
    for line in ip("netns", "list").stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(f"gshost-c{index}-"):
            ip("netns", "delete", name, check=False)
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
    ip("link", "delete", f"gsc{index}", check=False)


@dataclass
class Host:
    """One network namespace with one address on the cluster's bridge."""

    name: str
    namespace: str
    address: str

    def command(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *argv]


@dataclass
class Network:
    index: int
    hosts: list[Host] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"gsc{self.index}"

    @property
    def gateway(self) -> str:
        """The machine's own address on the bridge."""
        return f"{SUBNET_PREFIX}.{self.index}.1"

    @property
    def cidr(self) -> str:
        return f"{SUBNET_PREFIX}.{self.index}.0/24"

    @classmethod
    def create(cls) -> Network:
        """Take the first free cluster index: creating the bridge is the atomic claim."""
        OWNERS_DIR.mkdir(parents=True, exist_ok=True)
        for index in range(1, MAX_CLUSTERS):
            if ip("link", "show", f"gsc{index}", check=False).returncode == 0:
                if _owner_alive(index):
                    continue
                _remove_leftovers(index)
            if ip("link", "add", f"gsc{index}", "type", "bridge", check=False).returncode != 0:
                continue
            (OWNERS_DIR / f"gsc{index}.pid").write_text(str(os.getpid()))
            network = cls(index)
            ip("addr", "add", f"{network.gateway}/24", "dev", network.bridge)
            ip("link", "set", network.bridge, "up")
            return network
        raise RuntimeError("no free cluster subnet under 10.210.0.0/16")

    def add_host(self, name: str) -> Host:
        number = len(self.hosts) + 10
        host = Host(name, f"gshost-c{self.index}-{name}", f"{SUBNET_PREFIX}.{self.index}.{number}")
        outer, inner = f"gsc{self.index}h{number}", f"gsc{self.index}n{number}"
        ip("netns", "add", host.namespace)
        self.hosts.append(host)
        etc = NETNS_ETC / host.namespace
        etc.mkdir(parents=True, exist_ok=True)
        machine_hosts = Path("/etc/hosts").read_text()
        (etc / "hosts").write_text(f"{machine_hosts.rstrip()}\n{self.gateway} {MACHINE_NAME}\n")
        ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        ip("link", "set", inner, "netns", host.namespace)
        ip("link", "set", outer, "master", self.bridge, "up")
        inside = ("-n", host.namespace)
        ip(*inside, "link", "set", inner, "name", "eth0")
        ip(*inside, "addr", "add", f"{host.address}/24", "dev", "eth0")
        ip(*inside, "link", "set", "eth0", "up")
        ip(*inside, "link", "set", "lo", "up")
        ip(*inside, "route", "add", "default", "via", self.gateway)
        return host

    def remove(self) -> None:
        for host in self.hosts:
            ip("netns", "delete", host.namespace, check=False)  # its veth pair goes with it
            shutil.rmtree(NETNS_ETC / host.namespace, ignore_errors=True)
        self.hosts.clear()
        ip("link", "delete", self.bridge, check=False)
        (OWNERS_DIR / f"gsc{self.index}.pid").unlink(missing_ok=True)
