"""A network of its own for each game: a network namespace, a veth pair to the node, and the
game's port (TCP and UDP) forwarded to it from the node's addresses, loopback included.

Slots: slot N is the /30 at 100.72.0.0 + 4N (the node's end .1, the game's .2), the namespace
`gshN`, the node's end of the pair `gshhN`. Slots are claimed as files in one registry per
machine (/run/gshost-sandbox/slots, gone at a reboot with the namespaces), so agents on one
machine never share one, and whatever a crashed agent left (a namespace, forwarding rules of a
game whose keeper is gone) is swept by the next agent to start.

The node's side of each pair has no IPv6 (`disable_ipv6`: the kernel drops every IPv6 packet
that arrives on it) and the game's side no IPv6 address (`addrgenmode none`; a game cannot add
one): a game reaches nothing over IPv6, link-local included, while its own loopback (`::1`)
still works for it. `route_localnet` is on only for the node's ends of the pairs (players on
the node's loopback are forwarded through them), never for all interfaces; an earlier agent's
`all` is put back to 0. The packet rules and these settings are in `gshost_agent.netrules`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gshost_agent import netrules
from gshost_agent.netrules import NETWORK, PREFIX

logger = logging.getLogger("gshost_agent.netns")

REGISTRY = Path("/run/gshost-sandbox")
SLOT_COUNT = NETWORK.num_addresses // 4
NETNS_DIR = Path("/run/netns")
# A slot claimed this long ago whose keeper never came is a crashed start's: swept.
CLAIM_GRACE_SECONDS = 120.0
POOL_SIZE = 8  # networks an agent keeps made ahead (AGENT_NETWORK_POOL)
# The pool is topped up once no start has taken a network for this long, as the blank
# filesystems are (disks.REFILL_QUIET_SECONDS): never during a burst of starts, whose games'
# own start would wait behind `ip` for the node's cores, and whose stops then put their
# networks back in the pool instead of removing them.
REFILL_QUIET_SECONDS = 60.0
COMMAND_TIMEOUT_SECONDS = 20.0


class PortTaken(RuntimeError):
    """Another server on this machine, or the node itself, has the port."""


class NetworkError(RuntimeError):
    """A namespace or its forwarding could not be made."""


@dataclass(frozen=True)
class Slot:
    number: int

    @property
    def netns(self) -> str:
        return f"{PREFIX}{self.number}"

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.netns

    @property
    def host_link(self) -> str:
        return f"{PREFIX}h{self.number}"

    @property
    def game_link(self) -> str:
        return f"{PREFIX}g{self.number}"

    @property
    def host_address(self) -> str:
        return str(NETWORK.network_address + 4 * self.number + 1)

    @property
    def game_address(self) -> str:
        return str(NETWORK.network_address + 4 * self.number + 2)


def _link_exists(name: str) -> bool:
    """A link of the agent's network namespace (/proc/sys/net is the namespace of whoever
    reads it; /sys/class/net that of its mount, the machine's for an agent run by nsenter)."""
    return (netrules.SYSCTL_ROOT / "net/ipv4/conf" / name).exists()


def _removal(slot: Slot) -> str:
    """`ip -force -batch` lines that remove what of the slot's network exists."""
    lines = []
    if _link_exists(slot.host_link):
        lines.append(f"link delete {slot.host_link}")
    if slot.netns_path.exists():
        lines.append(f"netns delete {slot.netns}")
    return "\n".join(lines) + "\n"


def forwarding_rules(slot: Slot, port: int) -> list[str]:
    """The slot's rules in GSHOST-DNAT, as iptables-save writes them (without -A/-D)."""
    return netrules.forwarding_rules(slot.game_address, port)


class Registry:
    """The machine's slots: one JSON file each, claimed with O_EXCL under one lock."""

    def __init__(self, root: Path = REGISTRY) -> None:
        self.root = root
        self.slots = root / "slots"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The machine's lock of the slots. Agents take it on their event loop, so it is held
        only for file operations, never across a command."""
        descriptor = self._lock_file("lock")
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    @contextlib.asynccontextmanager
    async def rules_locked(self) -> AsyncIterator[None]:
        """The lock of the agent's node network's rules, waited for off the event loop: agents
        of one node network check and add its rules one at a time (else both add them)."""
        network = "".join(filter(str.isdigit, node_network()))
        descriptor = self._lock_file(f"rules-{network}.lock")
        try:
            await asyncio.to_thread(fcntl.flock, descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    def _lock_file(self, name: str) -> int:
        self.slots.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        return os.open(self.root / name, os.O_RDWR | os.O_CREAT, 0o600)

    def entries(self) -> dict[int, dict[str, Any]]:
        found = {}
        with contextlib.suppress(FileNotFoundError):
            for path in self.slots.iterdir():
                if path.suffix == ".json" and path.stem.isdigit():
                    with contextlib.suppress(OSError, ValueError):
                        found[int(path.stem)] = json.loads(path.read_text())
        return found

    def claim(self, owner: dict[str, Any], port: int | None, pooled: Slot | None = None) -> Slot:
        """A slot for `owner` (`pooled`, one this agent made ahead, else a free one);
        PortTaken when a live slot forwards `port` already. Without a port: a slot for the
        agent's pool (`owner` names the agent's pid as `pooled_by`)."""
        here = node_network()
        with self.locked():
            entries = self.entries()
            for entry in entries.values():
                forwarded_here = entry.get("port") == port and entry.get("node_network") == here
                if port is not None and forwarded_here and not stale(entry):
                    raise PortTaken(f"port {port} is forwarded to another server on this node")
            entry = {**owner, "port": port, "claimed_at": time.time(), "node_network": here}
            if pooled is not None:
                self._write(pooled, entry)
                return pooled
            for number in range(SLOT_COUNT):
                if number in entries:
                    continue
                path = self.slots / f"{number}.json"
                with contextlib.suppress(FileExistsError):
                    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(descriptor, "w") as file:
                        json.dump(entry, file)
                    return Slot(number)
        raise NetworkError("no network slot left on this machine")

    def _write(self, slot: Slot, entry: dict[str, Any]) -> None:
        path = self.slots / f"{slot.number}.json"
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(json.dumps(entry))
        os.replace(temporary, path)

    def pool(self, slot: Slot, agent_pid: int) -> None:
        """`slot` kept by the agent for a next game (its network made, nothing forwarded)."""
        with self.locked():
            self._write(slot, {"pooled_by": agent_pid, "port": None, "claimed_at": time.time()})

    def mark_sweeping(self, slot: Slot, agent_pid: int, entry: dict[str, Any]) -> None:
        """`slot` being removed by the agent `agent_pid` (call with the lock held); what it
        forwards (`entry`'s port, on its node) stays taken until its rules are gone."""
        kept: dict[str, Any] = {key: entry[key] for key in ("port", "node_network") if key in entry}
        self._write(slot, {**kept, "swept_by": agent_pid, "claimed_at": time.time()})

    def hold_unclaimed(self, slot: Slot, agent_pid: int) -> bool:
        """`slot` marked as being swept by `agent_pid` if no entry holds it (what is left of
        it may then be removed, and `release` frees it); False when it is claimed."""
        with self.locked():
            if slot.number in self.entries():
                return False
            self.mark_sweeping(slot, agent_pid, {})
            return True

    def note_keeper(self, slot: Slot, keeper_pid: int) -> None:
        path = self.slots / f"{slot.number}.json"
        with contextlib.suppress(OSError, ValueError):
            entry = json.loads(path.read_text())
            temporary = path.with_name(f".{path.name}.tmp")
            temporary.write_text(json.dumps({**entry, "keeper_pid": keeper_pid}))
            os.replace(temporary, path)

    def release(self, slot: Slot) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.slots / f"{slot.number}.json").unlink()


def node_network() -> str:
    """The network namespace the agent runs in: the node whose ports a slot forwards. One
    machine may hold several nodes, each in a namespace of its own (the fleet tests do)."""
    return os.readlink("/proc/self/ns/net")


def stale(entry: dict[str, Any]) -> bool:
    """A slot nobody holds: its keeper is gone, or it never came, or (a pooled one, or one
    being swept) the agent that holds it is gone."""
    if "pooled_by" in entry:
        return not _alive(entry["pooled_by"])
    if "swept_by" in entry:
        return not _alive(entry["swept_by"])
    keeper_pid = entry.get("keeper_pid")
    if keeper_pid is None:
        return float(entry.get("claimed_at", 0)) < time.time() - CLAIM_GRACE_SECONDS
    try:
        os.kill(int(keeper_pid), 0)
    except (ProcessLookupError, ValueError, TypeError):
        return True
    except PermissionError:
        return False
    return False


def _alive(pid: object) -> bool:
    try:
        os.kill(int(pid), 0)  # type: ignore[call-overload]
    except (ProcessLookupError, ValueError, TypeError):
        return False
    except PermissionError:
        return True
    return True


def host_port_in_use(port: int) -> bool:
    """Something of the node's own listens on `port` (forwarding would hide it)."""
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as probe:
            try:
                probe.bind(("0.0.0.0", port))  # noqa: S104 (a probe, closed at once)
            except OSError:
                return True
    return False


async def run(*argv: str, stdin: str | None = None, check: bool = True) -> str:
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    data = stdin.encode() if stdin is not None else None
    out, err = await asyncio.wait_for(process.communicate(data), COMMAND_TIMEOUT_SECONDS)
    if check and process.returncode != 0:
        raise NetworkError(f"{' '.join(argv[:3])}: {err.decode(errors='replace').strip()}")
    return out.decode(errors="replace")


class Networks:
    """Makes and removes games' networks (as root)."""

    def __init__(
        self,
        ip: str,
        iptables: str,
        iptables_restore: str,
        registry: Registry,
        pool_size: int = POOL_SIZE,
        *,
        ip6tables: str | None = None,
        ip6tables_restore: str | None = None,
    ) -> None:
        self.ip = ip
        self.iptables = iptables
        self.iptables_restore = iptables_restore
        self.ip6tables = ip6tables
        self.ip6tables_restore = ip6tables_restore
        self.registry = registry
        self._ready = False
        # The registry's lock is a file lock, held across awaits: one coroutine at a time.
        self._lock = asyncio.Lock()
        # Networks made ahead (nothing forwarded yet): a start then only adds its forwarding.
        self.pool_size = pool_size
        self._pool: list[Slot] = []
        self._refilling: asyncio.Task[None] | None = None
        self._refill_at = 0.0  # time.monotonic(): not before
        # Forwarding to remove, gathered while an iptables-restore runs (stops at once).
        self._unforwarding: list[tuple[list[str], asyncio.Future[None]]] = []
        self._unforwarder: asyncio.Task[None] | None = None
        self._removing: set[asyncio.Task[None]] = set()

    async def prepare(self) -> None:
        """The node's side, made once (the chains stay while the machine runs). The links of
        games an earlier agent started are sealed first, so their players on the node's
        loopback keep their games when `all.route_localnet` goes back to 0."""
        for link in sorted((netrules.SYSCTL_ROOT / "net/ipv4/conf").glob(f"{PREFIX}h[0-9]*")):
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                netrules.seal_link(link.name)
        for key, value in netrules.NODE_SYSCTLS.items():
            (netrules.SYSCTL_ROOT / key).write_text(value)
        async with self._lock:
            await self._prepare_rules()
        self._ready = True

    async def _prepare_rules(self) -> None:
        async with self.registry.rules_locked():
            for table in ("nat", "filter"):
                present = await run(self.iptables, "-w", "-t", table, "-S", check=False)
                restore = netrules.restore_v4(table, present)
                if restore is not None:
                    await run(self.iptables_restore, "-w", "--noflush", stdin=restore)
            if not (netrules.SYSCTL_ROOT / "net/ipv6").exists():
                return  # a kernel without IPv6: nothing to seal
            if self.ip6tables is None or self.ip6tables_restore is None:
                raise NetworkError("ip6tables is needed to seal games' networks for IPv6")
            present = await run(self.ip6tables, "-w", "-t", "filter", "-S", check=False)
            restore = netrules.restore_v6("filter", present)
            if restore is not None:
                await run(self.ip6tables_restore, "-w", "--noflush", stdin=restore)

    async def open(self, owner: dict[str, Any], port: int) -> Slot:
        """A new network for a game listening on `port`; PortTaken when it is not free."""
        if not self._ready:
            await self.prepare()
        if host_port_in_use(port):
            raise PortTaken(f"port {port} is in use on this node")
        pooled = self._pool.pop() if self._pool else None
        async with self._lock:
            try:
                slot = self.registry.claim(owner, port, pooled)
            except PortTaken:
                if pooled is not None:
                    self._pool.append(pooled)
                raise
        try:
            if pooled is None:
                await self._make(slot)
            await self._forward(slot, port)
        except BaseException:
            await self.close(slot, port, keep=False)
            raise
        self.refill(after=REFILL_QUIET_SECONDS)
        return slot

    def refill(self, *, after: float = 0.0) -> None:
        """Networks made ahead again, up to the pool's size, in the background: once `after`
        seconds have passed without another call asking for later."""
        self._refill_at = time.monotonic() + after
        if self.pool_size and (self._refilling is None or self._refilling.done()):
            self._refilling = asyncio.get_running_loop().create_task(self._refill())

    async def _refill(self) -> None:
        while len(self._pool) < self.pool_size:
            if (wait := self._refill_at - time.monotonic()) > 0:
                await asyncio.sleep(wait)  # and again if a start since asked for later
                continue
            async with self._lock:
                slot = self.registry.claim({"pooled_by": os.getpid()}, None)
            try:
                await self._make(slot)
            except Exception:
                logger.exception("cannot make a network ahead (slot %s)", slot.number)
                await self.close(slot, None, keep=False)
                return
            self._pool.append(slot)

    async def drain(self) -> None:
        """The networks made ahead, removed (the agent is ending)."""
        if self._refilling is not None:
            self._refilling.cancel()
        while self._pool:
            await self.close(self._pool.pop(), None, keep=False)
        if self._removing:
            await asyncio.wait(set(self._removing), timeout=COMMAND_TIMEOUT_SECONDS)

    async def _forward(self, slot: Slot, port: int) -> None:
        rules = "\n".join(f"-A {rule}" for rule in forwarding_rules(slot, port))
        for attempt in range(3):  # another program changing the rules meanwhile: again
            try:
                restore = f"*nat\n{rules}\nCOMMIT\n"
                await run(self.iptables_restore, "-w", "--noflush", stdin=restore)
                return
            except NetworkError:
                if attempt == 2:
                    raise
                logger.warning("forwarding for slot %s failed; trying again", slot.number)
                await asyncio.sleep(0.1)

    async def _make(self, slot: Slot) -> None:
        await self._remove_link(slot)  # of a namespace a dying process still held
        outside = "\n".join(
            [
                f"netns add {slot.netns}",
                f"link add {slot.host_link} type veth peer name {slot.game_link} "
                f"netns {slot.netns}",
                f"addr add {slot.host_address}/30 dev {slot.host_link}",
                f"link set {slot.host_link} addrgenmode none",  # no IPv6 address, ever
                f"link set {slot.host_link} up",
            ]
        )
        inside = "\n".join(
            [
                f"addr add {slot.game_address}/30 dev {slot.game_link}",
                f"link set {slot.game_link} addrgenmode none",
                f"link set {slot.game_link} up",
                "link set lo up",
                f"route add default via {slot.host_address}",
            ]
        )
        await run(self.ip, "-batch", "-", stdin=outside + "\n")
        netrules.seal_link(slot.host_link)
        await run(self.ip, "-n", slot.netns, "-batch", "-", stdin=inside + "\n")

    async def close(self, slot: Slot, port: int | None, *, keep: bool = True) -> None:
        """The game's forwarding gone; its network kept for a next game (`keep`, while the
        pool is not full), else gone too (what of it exists) and its slot free."""
        if port is not None:
            await self._unforward(forwarding_rules(slot, port))
        if not keep:
            await self._remove(slot)
            return
        # Its game and all it ran have ended: the slot is the agent's again, with no port.
        self.registry.pool(slot, os.getpid())
        if len(self._pool) < self.pool_size and slot.netns_path.exists():
            self._pool.append(slot)
            return
        # Removed after the game's end is reported: nothing waits on it.
        task = asyncio.get_running_loop().create_task(self._remove(slot))
        self._removing.add(task)
        task.add_done_callback(self._removing.discard)

    async def _unforward(self, rules: list[str]) -> None:
        """The rules deleted; those of stops under way together go in one iptables-restore
        (each takes the machine's xtables lock and rewrites the table: one per stop made a
        burst of stops wait in line)."""
        done = asyncio.get_running_loop().create_future()
        self._unforwarding.append((rules, done))
        if self._unforwarder is None or self._unforwarder.done():
            self._unforwarder = asyncio.get_running_loop().create_task(self._unforward_all())
        await done

    async def _unforward_all(self) -> None:
        while self._unforwarding:
            batch, self._unforwarding = self._unforwarding, []
            deleted = [rule for rules, _ in batch for rule in rules]
            outcome: BaseException | None = None
            try:
                await self._delete(deleted)
            except Exception as error:  # a helper that hung: each stop says so
                outcome = error
            for _, done in batch:
                if done.done():
                    continue
                if outcome is None:
                    done.set_result(None)
                else:
                    done.set_exception(outcome)

    async def _delete(self, rules: list[str]) -> None:
        restore = "*nat\n" + "".join(f"-D {rule}\n" for rule in rules) + "COMMIT\n"
        try:
            await run(self.iptables_restore, "-w", "--noflush", stdin=restore)
        except NetworkError:  # some are gone already: the others one by one
            for rule in rules:
                await run(self.iptables, "-w", "-t", "nat", "-D", *rule.split(), check=False)

    async def _remove(self, slot: Slot) -> None:
        """The slot's pair and namespace gone (the pair first: a namespace that a dying process
        still holds outlives its removal, and so would its pair), and the slot free."""
        await run(self.ip, "-force", "-batch", "-", stdin=_removal(slot), check=False)
        self.registry.release(slot)

    async def _remove_link(self, slot: Slot) -> None:
        """The node's end of the slot's pair, where it outlived its namespace."""
        if _link_exists(slot.host_link):
            await run(self.ip, "link", "delete", slot.host_link, check=False)

    async def sweep(self) -> list[int]:
        """What agents that are gone left: slots whose keeper is gone, and namespaces and
        forwarding rules that no slot holds. The slots swept."""
        async with self._lock:
            return await self._sweep()

    async def _sweep(self) -> list[int]:
        swept = []
        with self.registry.locked():
            entries = self.registry.entries()
            live = {number for number, entry in entries.items() if not stale(entry)}
            # Marked as this agent's to remove, under the lock: another agent sweeping at the
            # same time leaves them be, so it never removes a slot claimed anew once this one
            # has freed it.
            for number in set(entries) - live:
                self.registry.mark_sweeping(Slot(number), os.getpid(), entries[number])
        for number, entry in entries.items():
            if number not in live:
                port = entry.get("port")
                await self.close(Slot(number), port if isinstance(port, int) else None, keep=False)
                swept.append(number)
        listed = await run(self.ip, "netns", "list", check=False)
        for line in listed.splitlines():
            name = line.split(" ", 1)[0]
            digits = name.removeprefix(PREFIX)
            if name.startswith(PREFIX) and digits.isdigit() and int(digits) not in live:
                slot = Slot(int(digits))
                if self.registry.hold_unclaimed(slot, os.getpid()):  # else claimed meanwhile
                    await run(self.ip, "netns", "delete", name, check=False)
                    self.registry.release(slot)
        present = await run(self.iptables, "-w", "-t", "nat", "-S", "GSHOST-DNAT", check=False)
        for line in present.splitlines():
            rule = line.removeprefix("-A ")
            address = rule.rpartition("--to-destination ")[2].split(":")[0]
            if rule == line or not address:
                continue
            number = (int(ipaddress.IPv4Address(address)) - int(NETWORK.network_address)) // 4
            slot = Slot(number)
            if self.registry.hold_unclaimed(slot, os.getpid()):
                await run(self.iptables, "-w", "-t", "nat", "-D", *rule.split(), check=False)
                self.registry.release(slot)
        return swept
