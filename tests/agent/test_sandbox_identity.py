"""Hostile games against what runs as root, who a game is, and the kernel it may call: a
library planted for root's helpers, per-user kernel state shared with a neighbour, and the
system calls and user namespaces a container refuses. Real agents, keepers and games."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gshost_agent.identities import ServerIds, in_range
from tests.agent.conftest import TEST_TEMPLATES, new_server_id
from tests.agent.lines import wait_until

TEMPLATES = {
    # Steam games' usual environment: a relative library path, read from the game's directory.
    "planter": """
name = "planter"
command = ["{python}", "-I", "{game_files}/planter.py"]
environment = { LD_LIBRARY_PATH = "./lib", PYTHONUNBUFFERED = "1" }
files = ["planter.py"]
ready_pattern = '^ready$'
stop_command = ""
stop_timeout_seconds = 2
""",
    # Runs each console line's probe of the kernel and prints what came of it, as JSON.
    "prober": """
name = "prober"
command = ["{python}", "-I", "{game_files}/prober.py"]
environment = { PYTHONUNBUFFERED = "1" }
files = ["prober.py"]
ready_pattern = '^ready$'
stop_command = ""
stop_timeout_seconds = 2
""",
}

# Plants lib/libpcre2-8.so.0 (which nsenter and bwrap load through libselinux): the real
# library's functions as stubs, and a constructor that records who loaded it. Then loads it
# itself, as the game, through a program that needs it.
PLANTER = r"""
import os, subprocess, sys
directory = os.getcwd()
tools = {**os.environ, "PATH": "/usr/bin:/bin"}  # LD_LIBRARY_PATH stays: the template's
constructor = (
    "#include <stdio.h>\n#include <unistd.h>\n"
    "__attribute__((constructor)) static void planted(void) {\n"
    f'  FILE *f = fopen("{directory}/planted.log", "a");\n'
    '  if (f) { fprintf(f, "euid=%d\\n", (int)geteuid()); fclose(f); }\n}\n'
)
real = "/lib/x86_64-linux-gnu/libpcre2-8.so.0"
symbols = subprocess.run(
    ["nm", "-D", "--defined-only", real], capture_output=True, text=True, env=tools
)
stubs = "".join(
    f"void {fields[2]}(void) {{}}\n"
    for fields in (line.split() for line in symbols.stdout.splitlines())
    if len(fields) == 3 and fields[1] == "T"
)
os.makedirs("lib", exist_ok=True)
with open("/tmp/planted.c", "w") as source:
    source.write(constructor + stubs)
built = subprocess.run(
    ["gcc", "-shared", "-fPIC", "-o", "lib/libpcre2-8.so.0", "/tmp/planted.c"],
    capture_output=True, text=True, env=tools,
)
print(f"planted {built.returncode} {built.stderr.strip()[:200]}", flush=True)
subprocess.run(["grep", "-q", "x", "/tmp/planted.c"], capture_output=True, env=tools)
print("ready", flush=True)
sys.stdin.read()
"""

PROBER = r"""
import ctypes, errno, json, os, subprocess, sys

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER = 0x10000000
NR = {"keyctl": 250, "add_key": 248, "mount": 165, "clone": 56, "unshare": 272}

def syscall(name, *args):
    result = libc.syscall(NR[name], *args)
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]

def status():
    fields = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines())
    return {"seccomp": fields["Seccomp"].strip(), "uid": os.getuid(), "gid": os.getgid()}

def kernel():
    unshare = subprocess.run(["unshare", "-U", "true"], capture_output=True, text=True)
    clone = libc.syscall(NR["clone"], CLONE_NEWUSER | 17, 0, 0, 0, 0)
    if clone == 0:
        os._exit(0)  # the child, in a user namespace of its own
    return {
        "unshare -U": unshare.returncode,
        "clone NEWUSER": "ok" if clone > 0 else errno.errorcode[ctypes.get_errno()],
        "unshare NEWUSER": syscall("unshare", CLONE_NEWUSER),
        "add_key": syscall("add_key", b"user", b"secret", b"tenant", 6, -2),
        "keyctl": syscall("keyctl", 0, -2, 0),
        "mount": syscall("mount", b"none", b"/tmp", b"tmpfs", 0, 0),
    }

held = []
def inotify_hog():
    while True:
        descriptor = libc.inotify_init1(0)
        if descriptor < 0:
            return {"held": len(held), "then": errno.errorcode[ctypes.get_errno()]}
        held.append(descriptor)

def inotify_one():
    descriptor = libc.inotify_init1(0)
    if descriptor < 0:
        return {"inotify": errno.errorcode[ctypes.get_errno()]}
    os.close(descriptor)
    return {"inotify": "ok"}

PROBES = {"status": status, "kernel": kernel, "inotify-hog": inotify_hog, "inotify": inotify_one}
print("ready", flush=True)
for line in sys.stdin:
    name = line.strip()
    print(json.dumps({"probe": name, **PROBES[name]()}), flush=True)
"""


@pytest.fixture(scope="module")
def games_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="gshost-agent-games-", dir="/tmp"))
    for name, text in {**TEST_TEMPLATES, **TEMPLATES}.items():
        (directory / f"{name}.toml").write_text(text)
    (directory / "planter.py").write_text(PLANTER)
    (directory / "prober.py").write_text(PROBER)
    os.chmod(directory, 0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def probe(agent, server_id: str, name: str) -> dict:
    agent.console(server_id, name)
    return json.loads(agent.wait_for_console(server_id, rf'^\{{"probe": "{name}"', timeout=20))


def planted_by(directory: Path) -> list[str]:
    log = directory / "planted.log"
    return log.read_text().split() if log.exists() else []


def test_a_library_the_game_plants_for_root_never_runs_as_root(agent, control_plane):
    server_id, port = agent.start_server("planter")
    control_plane.wait_for_report(server_id, "ready", timeout=60)
    assert agent.wait_for_console(server_id, "^planted ").startswith("planted 0")
    directory = agent.data_dir / "servers" / server_id
    game_uid = agent.game_process(server_id).uids().real
    assert planted_by(directory) == [f"euid={game_uid}"]  # it loads, in the game's environment

    body = {"game": "planter", "port": port, "memory_mb": 256}
    agent.request("POST", f"/v1/servers/{server_id}/restart", body)
    wait_until(lambda: len(control_plane.reports_of(server_id)) >= 2, timeout=60)

    assert [r["kind"] for r in control_plane.reports_of(server_id)] == ["ready", "ready"]
    assert set(planted_by(directory)) == {f"euid={game_uid}"}


def test_two_servers_games_run_as_two_users_of_their_own(agent, control_plane):
    first, _ = agent.start_server("prober")
    second, _ = agent.start_server("prober")
    control_plane.wait_for_report(first, "ready")
    control_plane.wait_for_report(second, "ready")

    one, two = probe(agent, first, "status"), probe(agent, second, "status")

    assert 0 not in (one["uid"], one["gid"], two["uid"], two["gid"])
    assert one["uid"] != two["uid"] and one["gid"] != two["gid"]
    assert in_range(one["uid"]) and in_range(two["uid"])


def test_a_game_that_takes_every_inotify_instance_leaves_its_neighbour_its_own(
    agent, control_plane
):
    hog, neighbour = agent.start_server("prober"), agent.start_server("prober")
    control_plane.wait_for_report(hog[0], "ready")
    control_plane.wait_for_report(neighbour[0], "ready")

    taken = probe(agent, hog[0], "inotify-hog")

    assert taken["then"] == "EMFILE" and taken["held"] > 0
    assert probe(agent, neighbour[0], "inotify")["inotify"] == "ok"


def test_the_game_runs_under_seccomp_that_refuses_keyrings_and_mounts(agent, control_plane):
    server_id, _ = agent.start_server("prober")
    control_plane.wait_for_report(server_id, "ready")

    assert probe(agent, server_id, "status")["seccomp"] == "2"
    refused = probe(agent, server_id, "kernel")

    assert refused["add_key"] == refused["keyctl"] == "EPERM"
    assert refused["mount"] == "EPERM"


def test_the_game_cannot_make_a_user_namespace(agent, control_plane):
    server_id, _ = agent.start_server("prober")
    control_plane.wait_for_report(server_id, "ready")

    refused = probe(agent, server_id, "kernel")

    assert refused["unshare -U"] != 0
    assert refused["clone NEWUSER"] == refused["unshare NEWUSER"] == "EPERM"


def test_a_directory_the_one_game_user_wrote_is_the_servers_own_at_its_next_start(
    agent, control_plane
):
    server_id = new_server_id()
    directory = agent.data_dir / "servers" / server_id
    directory.mkdir(parents=True)
    world = directory / "world.dat"
    world.write_text(json.dumps({"ticks": 7, "names_ever": ["alice"]}))
    os.chown(directory, 0, 270_123)  # as an earlier agent left it: its group, the user's file
    os.chown(world, 990, 270_123)
    os.chmod(world, 0o600)

    agent.start_server("demo", server_id=server_id)
    control_plane.wait_for_report(server_id, "ready")
    agent.console(server_id, "save")
    agent.wait_for_console(server_id, "^saved$")

    uid = agent.game_process(server_id).uids().real
    assert json.loads(world.read_text())["names_ever"] == ["alice"]  # it read what it had
    assert (world.stat().st_uid, world.stat().st_gid) == (uid, uid)
    assert directory.stat().st_gid == uid


def test_a_server_deleted_from_the_node_gives_its_id_back(agent, control_plane):
    server_id, _ = agent.start_server("prober")
    control_plane.wait_for_report(server_id, "ready")
    directory = agent.data_dir / "servers" / server_id
    assert ServerIds().id_of(directory) == agent.game_process(server_id).uids().real
    agent.request("POST", f"/v1/servers/{server_id}/stop")
    control_plane.wait_for_report(server_id, "halted")
    wait_until(lambda: agent.state_of(server_id) == "stopped")

    assert agent.request("DELETE", f"/v1/servers/{server_id}").status_code == 200

    assert not directory.exists() and ServerIds().id_of(directory) is None


def test_a_server_keeps_its_id_and_no_other_directory_gets_it(tmp_path: Path) -> None:
    one, two = tmp_path / "a" / "servers" / "srv_one", tmp_path / "b" / "servers" / "srv_two"
    one.mkdir(parents=True)
    two.mkdir(parents=True)
    first_agent, second_agent = ServerIds(tmp_path / "ids"), ServerIds(tmp_path / "ids")

    held = first_agent.claim(one)

    assert second_agent.claim(two) != held
    assert first_agent.claim(one) == held


def test_a_servers_id_is_free_again_once_it_is_deleted(tmp_path: Path) -> None:
    server_dir = tmp_path / "servers" / "srv_one"
    server_dir.mkdir(parents=True)
    ids = ServerIds(tmp_path / "ids")
    held = ids.claim(server_dir)
    other = tmp_path / "servers" / "srv_two"
    other.mkdir()

    server_dir.rmdir()
    ids.release(server_dir)

    assert ids.claim(other, prefer=held) == held
