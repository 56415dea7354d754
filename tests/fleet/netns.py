"""Many hosts on one machine: a bridge on the host, and per host a network namespace whose veth
is on that bridge, with its own address in 10.201.0.0/16 (root only).

Names carry the test process's id (`gsf<pid>-<n>` namespaces, `gf<pid>h<n>` host-side veths,
`gf<pid>br` the bridge), so a run removes what a killed earlier run left, and never touches
another run's. `Network.close` removes everything it made, also after a failed test.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psutil

INNER_LINK = "eth0"
_OURS = re.compile(r"^(?:gsf(?P<ns>\d+)-\d+|gf(?P<link>\d+)(?:h\d+|br))$")


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=check, timeout=30)


def can_make_namespaces() -> bool:
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("nsenter")):
        return False
    try:
        return run("ip", "netns", "list", check=False).returncode == 0
    except OSError:
        return False


@dataclass(frozen=True)
class Host:
    index: int
    namespace: str
    host_link: str
    address: str

    def command(self, *command: str) -> list[str]:
        """`command` run inside this host's network namespace (and nothing else: the mounts,
        /sys/fs/cgroup included, stay the machine's)."""
        return ["nsenter", f"--net=/var/run/netns/{self.namespace}", *command]


class Network:
    """The bridge 10.201.<subnet>.1/24 and hosts .2, .3, ... on it."""

    def __init__(self) -> None:
        remove_leftovers()
        self.tag = str(os.getpid())
        self.bridge = f"gf{self.tag}br"
        self.subnet = _free_subnet()
        self.gateway = f"10.201.{self.subnet}.1"
        self.hosts: list[Host] = []
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")

    def add_hosts(self, count: int) -> list[Host]:
        first = len(self.hosts)
        hosts = [self._host(first + n) for n in range(count)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(self._make, hosts))
        self.hosts.extend(hosts)
        return hosts

    def _host(self, index: int) -> Host:
        if index > 250:
            raise ValueError("at most 250 hosts on one bridge")
        return Host(
            index=index,
            namespace=f"gsf{self.tag}-{index}",
            host_link=f"gf{self.tag}h{index}",
            address=f"10.201.{self.subnet}.{index + 2}",
        )

    def _make(self, host: Host) -> None:
        ns = host.namespace
        run("ip", "netns", "add", ns)
        run("ip", "link", "add", host.host_link, "type", "veth", "peer", "name", INNER_LINK,
            "netns", ns)  # fmt: skip
        run("ip", "link", "set", host.host_link, "master", self.bridge, "up")
        run("ip", "-n", ns, "addr", "add", f"{host.address}/24", "dev", INNER_LINK)
        run("ip", "-n", ns, "link", "set", INNER_LINK, "up")
        run("ip", "-n", ns, "link", "set", "lo", "up")

    def cut(self, host: Host) -> None:
        """The host's link goes down: nothing goes in or out of it."""
        run("ip", "-n", host.namespace, "link", "set", INNER_LINK, "down")

    def restore(self, host: Host) -> None:
        run("ip", "-n", host.namespace, "link", "set", INNER_LINK, "up")

    def remove_hosts(self, hosts: list[Host]) -> None:
        for host in hosts:
            run("ip", "link", "del", host.host_link, check=False)  # its peer goes with it
            run("ip", "netns", "del", host.namespace, check=False)
        self.hosts = [host for host in self.hosts if host not in hosts]

    def close(self) -> None:
        self.remove_hosts(list(self.hosts))
        run("ip", "link", "del", self.bridge, check=False)


def remove_leftovers() -> None:
    """Namespaces and links of runs whose process is gone (a run killed before its teardown)."""
    namespaces = [line.split()[0] for line in run("ip", "netns", "list").stdout.splitlines()]
    links = [
        line.split(":")[1].strip().split("@")[0]
        for line in run("ip", "-o", "link", "show").stdout.splitlines()
    ]
    for name in [*links, *namespaces]:
        match = _OURS.match(name)
        if match is None or psutil.pid_exists(int(match["ns"] or match["link"])):
            continue
        if match["ns"]:
            run("ip", "netns", "del", name, check=False)
        else:
            run("ip", "link", "del", name, check=False)


def _free_subnet() -> int:
    """A /24 of 10.201.0.0/16 no interface of this machine has an address in."""
    taken = run("ip", "-4", "-o", "addr", "show").stdout
    start = os.getpid() % 250 + 1
    for offset in range(250):
        subnet = (start + offset) % 250 + 1
        if f"10.201.{subnet}." not in taken:
            return subnet
    raise AssertionError("no free /24 in 10.201.0.0/16")


def kill_quietly(pid: int) -> None:
    with contextlib.suppress(psutil.Error):
        psutil.Process(pid).kill()
