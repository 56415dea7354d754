"""Chromium in a network namespace of its own, reaching this machine's loopback through a SOCKS5
relay of the test process.

Chromium drops every open connection with ERR_NETWORK_CHANGED when an address comes or goes on
any interface it can see, and the agent tests that run beside the browser tests make and remove
a veth for every sandboxed game. In a namespace whose only interface is its loopback nothing
ever changes. The relay's listening socket is made inside that namespace (a thread enters it
for the moment it takes); the connections it makes go out from the machine's own namespace,
to loopback addresses only.

The namespace is `gsb<pid>`: a run removes what a killed earlier run left. Without root (or
without `ip` and `nsenter`), Chromium runs in the machine's namespace as it is.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from gshost_agent.config import is_loopback

CLONE_NEWNET = 0x40000000
_OURS = re.compile(r"^gsb(?P<pid>\d+)$")
_LIBC = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class QuietNetwork:
    """What launching Chromium takes: the program to run and the flags to add."""

    executable: str
    flags: list[str]


def _run(*command: str) -> None:
    subprocess.run(command, capture_output=True, check=True, timeout=30)


def _can_make_namespaces() -> bool:
    return os.geteuid() == 0 and bool(shutil.which("ip") and shutil.which("nsenter"))


def remove_leftovers() -> None:
    """Namespaces of runs whose process is gone."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        match = _OURS.match(line.split()[0])
        if match is not None and not psutil.pid_exists(int(match["pid"])):
            subprocess.run(["ip", "netns", "delete", match[0]], capture_output=True)


def _listening_socket_in(namespace: str) -> socket.socket:
    """A socket listening on 127.0.0.1 of the namespace. setns moves only the calling thread,
    so a thread of its own enters the namespace, makes the socket and ends."""
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def make() -> None:
        try:
            with open(f"/run/netns/{namespace}") as target:
                if _LIBC.setns(target.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {namespace}")
                listener = socket.create_server(("127.0.0.1", 0), backlog=64)
                made.append(listener)
        except BaseException as error:  # handed to the caller's thread
            failed.append(error)

    thread = threading.Thread(target=make, name="quiet-network-setns")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


class Socks5Relay:
    """SOCKS5 CONNECT, no authentication, to loopback destinations only."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.port = listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="socks5-relay", daemon=True)
        self._thread.start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            try:
                upstream = self._handshake(client)
            except (OSError, ValueError):
                return
            with upstream:
                back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
                back.start()
                _pipe(client, upstream)
                back.join()

    def _handshake(self, client: socket.socket) -> socket.socket:
        _version, methods = _read(client, 2)
        _read(client, methods)
        client.sendall(b"\x05\x00")  # no authentication
        _version, command, _reserved, kind = _read(client, 4)
        if kind == 1:
            host = str(ipaddress.IPv4Address(_read(client, 4)))
        elif kind == 4:
            host = str(ipaddress.IPv6Address(_read(client, 16)))
        elif kind == 3:
            host = _read(client, _read(client, 1)[0]).decode("ascii")
        else:
            raise ValueError(f"address type {kind}")
        port = int.from_bytes(_read(client, 2), "big")
        if command != 1 or not is_loopback(host):
            client.sendall(b"\x05\x02\x00\x01" + bytes(6))  # not allowed by the ruleset
            raise ValueError(f"refused: command {command} to {host}")
        try:
            upstream = socket.create_connection((_loopback_address(host), port), timeout=10)
        except OSError:
            client.sendall(b"\x05\x05\x00\x01" + bytes(6))  # connection refused
            raise
        upstream.settimeout(None)
        client.sendall(b"\x05\x00\x00\x01" + bytes(6))
        return upstream


def _loopback_address(host: str) -> str:
    return "127.0.0.1" if host == "localhost" else host


def _read(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ValueError("closed mid-handshake")
        data += chunk
    return data


def _pipe(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            target.sendall(chunk)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def quiet_network(chromium: str) -> Iterator[QuietNetwork]:
    if not _can_make_namespaces():
        yield QuietNetwork(executable=chromium, flags=[])
        return
    remove_leftovers()
    namespace = f"gsb{os.getpid()}"
    subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
    _run("ip", "netns", "add", namespace)
    try:
        _run("ip", "-n", namespace, "link", "set", "lo", "up")
        relay = Socks5Relay(_listening_socket_in(namespace))
        with tempfile.TemporaryDirectory(prefix="gshost-chromium-") as directory:
            launcher = Path(directory) / "chromium"
            launcher.write_text(
                f'#!/bin/sh\nexec nsenter --net=/run/netns/{namespace} {chromium} "$@"\n'
            )
            launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
            flags = [
                f"--proxy-server=socks5://127.0.0.1:{relay.port}",
                "--proxy-bypass-list=<-loopback>",
            ]
            try:
                yield QuietNetwork(executable=str(launcher), flags=flags)
            finally:
                relay.close()
    finally:
        subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
