"""The sandbox's rules as plain functions, without a game: what the node can do, the command
line that seals a game in, and the network slots' addresses and forwarding."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from gshost_agent.netns import Networks, PortTaken, Registry, Slot, forwarding_rules, stale
from gshost_agent.sandbox import (
    GameBox,
    Sandboxing,
    SandboxUnavailable,
    detect,
    sandboxed_command,
    seccomp_argument,
    user_namespaces_refused,
)

TOOLS = tuple((name, f"/usr/bin/{name}") for name in ("nsenter", "bwrap", "setpriv", "env"))
BOX = GameBox(
    netns=Path("/run/netns/gsh3"),
    server_dir=Path("/var/lib/gshost-agent/servers/srv_x"),
    game_files=Path("/var/lib/gshost-agent/games/demo"),
    uid=300001,
    gid=300001,
    memory_mb=256,
    environment={"LD_LIBRARY_PATH": "./lib"},
)


def command() -> list[str]:
    return sandboxed_command(Sandboxing(True, tools=TOOLS), BOX, ["/usr/bin/python3", "-I"])


def pairs(argv: list[str], option: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, word in enumerate(argv) if word == option]


@pytest.mark.parametrize(
    ("privileged", "cgroups", "off", "allowed", "sandboxed", "may_start", "said"),
    [
        (True, True, False, False, True, True, "sandboxed: "),
        (False, True, False, False, False, False, "unsandboxed: the agent does not run as root"),
        (False, True, False, True, False, True, "unsandboxed (allowed by AGENT_ALLOW_UNSAND"),
        (True, False, False, False, False, False, "unsandboxed: no writable cgroup hierarchy"),
        (True, True, True, True, False, True, "unsandboxed (allowed by AGENT_ALLOW_UNSAND"),
        (True, True, True, False, False, False, "unsandboxed: turned off (AGENT_SANDBOX=off)"),
    ],
)
def test_what_the_node_can_do_decides_whether_games_start(
    privileged, cgroups, off, allowed, sandboxed, may_start, said
):
    found = detect(privileged=privileged, has_cgroups=cgroups, allow_unsandboxed=allowed, off=off)
    assert found.sandboxed is sandboxed
    assert found.describe().startswith(said) and len(found.describe()) <= 100
    if may_start:
        found.check_can_start()
    else:
        with pytest.raises(SandboxUnavailable):
            found.check_can_start()


def test_the_game_enters_its_network_then_drops_to_its_ids_then_bubblewrap():
    argv = command()
    assert argv[:3] == ["/usr/bin/nsenter", "--net=/run/netns/gsh3", "--"]
    drop_end = argv.index("--", 3)
    drop = argv[3:drop_end]
    assert drop[:4] == ["/usr/bin/setpriv", "--reuid=300001", "--regid=300001", "--groups=300001"]
    assert {"--no-new-privs", "--inh-caps=-all", "--bounding-set=-all"} <= set(drop)
    assert argv[drop_end + 1] == "/usr/bin/bwrap"
    assert argv[-5:] == ["/usr/bin/env", "--default-signal", "--", "/usr/bin/python3", "-I"]


def test_bubblewrap_allows_no_new_user_namespace_and_loads_the_seccomp_filter():
    argv = command()
    assert {"--unshare-user", "--disable-userns"} <= set(argv)
    assert argv[seccomp_argument(argv) - 1] == "--seccomp"


def test_the_templates_environment_is_set_by_bubblewrap_for_the_game_alone():
    argv = command()
    bwrap = argv.index("/usr/bin/bwrap")
    assert "LD_LIBRARY_PATH" not in argv[:bwrap]
    assert argv.index("--clearenv") < argv.index("--setenv")
    assert pairs(argv, "--setenv") == [("LD_LIBRARY_PATH", "./lib")]


def test_only_the_server_directory_is_writable():
    argv = command()
    assert pairs(argv, "--bind") == [(str(BOX.server_dir), "/server")]
    read_only = dict(pairs(argv, "--ro-bind"))
    assert {"/usr", "/etc", str(BOX.game_files)} <= set(read_only)
    assert read_only[str(BOX.game_files)] == "/game"
    assert "/" not in read_only and "/var" not in read_only and "/root" not in read_only


def test_tmp_and_shm_are_its_own_sized_to_its_memory():
    argv = command()
    for path in ("/tmp", "/dev/shm"):
        at = argv.index(path)
        assert argv[at - 5 : at] == ["--perms", "1777", "--size", str(256 << 20), "--tmpfs"]


def test_it_has_namespaces_of_its_own_and_dies_with_its_keeper():
    argv = command()
    for option in ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"):
        assert option in argv


def test_inside_its_paths_are_fixed_and_name_nothing_of_the_agents_data():
    argv = command()
    destinations = [argv[i + 2] for i, word in enumerate(argv) if word in ("--bind", "--ro-bind")]
    assert not [path for path in destinations if path.startswith("/var/lib/gshost-agent")]
    assert "--dir" not in argv
    assert argv[argv.index("--chdir") + 1] == "/server"
    assert argv[argv.index("--remount-ro") + 1] == "/"


@pytest.mark.parametrize(
    ("number", "node", "game", "names"),
    [
        (0, "100.72.0.1", "100.72.0.2", ("gsh0", "gshh0", "gshg0")),
        (1, "100.72.0.5", "100.72.0.6", ("gsh1", "gshh1", "gshg1")),
        (16383, "100.72.255.253", "100.72.255.254", ("gsh16383", "gshh16383", "gshg16383")),
    ],
)
def test_each_slot_is_a_30_of_its_own(number, node, game, names):
    slot = Slot(number)
    assert (slot.host_address, slot.game_address) == (node, game)
    assert (slot.netns, slot.host_link, slot.game_link) == names
    assert all(len(name) <= 15 for name in names)  # a Linux interface name


def test_only_the_games_port_is_forwarded_tcp_and_udp():
    assert forwarding_rules(Slot(1), 27015) == [
        "GSHOST-DNAT -p tcp -m tcp --dport 27015 -j DNAT --to-destination 100.72.0.6:27015",
        "GSHOST-DNAT -p udp -m udp --dport 27015 -j DNAT --to-destination 100.72.0.6:27015",
    ]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"keeper_pid": 1}, False),  # init: alive
        ({"keeper_pid": 2**22 + 1}, True),  # no such process
        ({"claimed_at": 0}, True),  # a start that never got its keeper
        ({"claimed_at": 9e12}, False),  # one under way
        ({"pooled_by": 1}, False),
        ({"pooled_by": 2**22 + 1}, True),
        ({"swept_by": 1}, False),  # another agent removing it
        ({"swept_by": 2**22 + 1}, True),  # one that died doing so
    ],
)
def test_a_slot_nobody_holds_is_stale(entry, expected):
    assert stale(entry) is expected


def test_a_slot_another_agent_is_sweeping_is_neither_claimed_nor_stale(tmp_path: Path) -> None:
    registry = Registry(tmp_path)
    with registry.locked():
        forwarded = {"port": 27015, "node_network": os.readlink("/proc/self/ns/net")}
        registry.mark_sweeping(Slot(0), os.getppid(), forwarded)  # by a live agent

    claimed = registry.claim({"server_id": "srv_b"}, 27000)

    assert claimed.number == 1
    assert not stale(registry.entries()[0])
    with pytest.raises(PortTaken):  # its forwarding is not gone yet
        registry.claim({"server_id": "srv_c"}, 27015)


# A stand-in for `ip` and `iptables`: notes each call and whether the slots' lock was free
# meanwhile; lists one namespace (gsh7) and one forwarding rule (to slot 8) that no slot holds.
COMMAND = """#!/bin/sh
TO=100.72.0.34:27015
if flock -n -x {lock} true; then state=free; else state=held; fi
echo "$state $*" >> {log}
case "$*" in
  "netns list") echo "gsh7 (id: 3)" ;;
  *"-S GSHOST-DNAT") echo "-A GSHOST-DNAT -p tcp --dport 27015 -j DNAT --to-destination $TO" ;;
esac
"""


def test_a_sweep_runs_no_command_while_it_holds_the_slots_lock(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "registry")
    log = tmp_path / "calls"
    command = tmp_path / "command"
    command.write_text(COMMAND.format(lock=registry.root / "lock", log=log))
    command.chmod(0o755)
    networks = Networks(str(command), str(command), str(command), registry)

    asyncio.run(networks.sweep())

    calls = log.read_text().splitlines()
    assert "free netns delete gsh7" in calls
    assert any(call.startswith("free -w -t nat -D GSHOST-DNAT") for call in calls)
    assert [call for call in calls if not call.startswith("free ")] == []
    assert registry.entries() == {}  # what it held while removing them, released


def _claimed_elsewhere(registry: Registry, port: int, node_network: str) -> None:
    """A live claim of `port` by a node in another network namespace of this machine."""
    registry.slots.mkdir(parents=True)
    entry = {"port": port, "keeper_pid": os.getpid(), "node_network": node_network}
    (registry.slots / "0.json").write_text(json.dumps(entry))


def test_a_port_another_server_of_this_node_forwards_is_taken(tmp_path: Path) -> None:
    registry = Registry(tmp_path)
    _claimed_elsewhere(registry, 27000, os.readlink("/proc/self/ns/net"))

    with pytest.raises(PortTaken):
        registry.claim({"server_id": "srv_b"}, 27000)


def test_a_port_a_node_in_another_namespace_forwards_is_free_here(tmp_path: Path) -> None:
    registry = Registry(tmp_path)
    _claimed_elsewhere(registry, 27000, "net:[1]")

    assert registry.claim({"server_id": "srv_b"}, 27000) == Slot(1)


def test_the_heartbeat_says_the_game_runs_under_seccomp_as_a_uid_of_its_servers_own():
    said = Sandboxing(True, tools=TOOLS).describe()
    assert "seccomp" in said and "uid per server" in said and "no user ns" in said


@pytest.mark.parametrize(
    ("switch", "value", "refused"),
    [
        ("user/max_user_namespaces", "0", True),
        ("user/max_user_namespaces", "96363", False),
        ("kernel/unprivileged_userns_clone", "0", True),
        ("kernel/apparmor_restrict_unprivileged_userns", "1", True),
    ],
)
def test_a_kernel_without_unprivileged_user_namespaces_cannot_sandbox(
    tmp_path: Path, switch: str, value: str, refused: bool
) -> None:
    (tmp_path / switch).parent.mkdir(parents=True)
    (tmp_path / switch).write_text(value + "\n")
    said = user_namespaces_refused(tmp_path)
    assert bool(said) is refused and (not refused or switch.replace("/", ".") in said)
