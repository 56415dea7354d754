"""The kernel enforces a server's `disk_mb`: each sandboxed server's directory is a filesystem
of its own. A hostile game (`diskhog`, this module's template) tries to dodge the limit, and
to learn where the agent keeps its data; restores, moves and plan changes work with it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gshost_agent.disks import Disks, find_tools
from tests.agent.conftest import Agent, ControlPlane, new_server_id
from tests.agent.lines import probe, wait_until
from tests.agent.test_data_jobs import backup, finished_report, server_dir, started_job
from tests.agent.test_transfers import commit, new_token, send, tree
from tests.processes import mounts_under

TEMPLATE = """
name = "diskhog"
command = ["{python}", "-I", "{game_files}/diskhog.py"]
environment = { PYTHONUNBUFFERED = "1" }
files = ["diskhog.py"]
ready_pattern = '^ready$'
stop_command = ""
stop_timeout_seconds = 2
"""

# Each console line is a probe; the answer is one line `<probe>: <result>`.
DISKHOG = """
import os, sys

kept = []  # files deleted but held open: what a directory walk never sees

def write(file, megabytes, sync=True):
    done = 0
    try:
        for _ in range(megabytes):
            file.write(b"x" * (1 << 20))
            file.flush()  # ext4 takes the blocks now (delayed allocation): a refusal is ENOSPC
            if sync:
                os.fsync(file.fileno())
            done += 1
    except OSError as error:
        return f"{done} MB then {os.strerror(error.errno)}"
    return f"{done} MB"

def probe(words):
    name, arguments = words[0], words[1:]
    if name == "hold":  # PATH MB: opened, deleted, then written while held
        file = open(arguments[0], "wb")
        os.unlink(arguments[0])
        kept.append(file)
        return write(file, int(arguments[1]))
    if name == "fill":  # PATH MB: in the page cache (the kernel counts it as taken)
        os.makedirs(os.path.dirname(arguments[0]) or ".", exist_ok=True)
        with open(arguments[0], "wb") as file:
            return write(file, int(arguments[1]), sync=False)
    if name == "many":  # DIR N: empty files
        made = 0
        try:
            for number in range(int(arguments[1])):
                open(os.path.join(arguments[0], f"f{number}"), "wb").close()
                made += 1
        except OSError as error:
            return f"{made} then {os.strerror(error.errno)}"
        return f"{made}"
    if name == "mountinfo":
        with open("/proc/self/mountinfo") as file:
            return " | ".join(file.read().splitlines())
    if name == "where":
        return os.getcwd()
    raise ValueError(f"no probe {name}")

print("ready", flush=True)
for line in sys.stdin:
    words = line.split()
    if words:
        try:
            print(f"{words[0]}: {probe(words)}", flush=True)
        except Exception as error:
            print(f"{words[0]}: failed {type(error).__name__} {error}", flush=True)
"""


@pytest.fixture(autouse=True)
def diskhog(games_dir: Path) -> None:
    (games_dir / "diskhog.toml").write_text(TEMPLATE)
    (games_dir / "diskhog.py").write_text(DISKHOG)


@pytest.fixture
def agent(make_agent: Any) -> Agent:
    started: Agent = make_agent()
    started.start()
    if not started.request("GET", "/v1/node").json()["isolation"].startswith("sandboxed"):
        pytest.skip("this machine cannot sandbox games (scripts/ensure-sandbox.sh)")
    return started


def diskhog_running(agent: Agent, plane: ControlPlane, **plan: Any) -> str:
    server_id, _ = agent.start_server("diskhog", **plan)
    plane.wait_for_report(server_id, "ready")
    return server_id


def megabytes(answer: str) -> int:
    return int(answer.split(" MB")[0])


def disk_reading(agent: Agent, server_id: str) -> float:
    return float(agent.request("GET", f"/v1/servers/{server_id}/stats").json()["disk_mb"])


def node_free_mb(agent: Agent) -> float:
    return shutil.disk_usage(agent.data_dir).free / (1 << 20)


def filesystem_mb(directory: Path) -> float:
    found = os.statvfs(directory)
    return found.f_blocks * found.f_frsize / (1 << 20)


def test_a_deleted_file_kept_open_stops_at_the_limit_and_the_node_keeps_its_disk(
    agent, control_plane
):
    server_id = diskhog_running(agent, control_plane, disk_mb=64)
    free_before = node_free_mb(agent)

    answer = probe(agent, server_id, "hold ghost.bin 400", timeout=120)

    assert answer.endswith("No space left on device"), answer
    assert 56 <= megabytes(answer) <= 64
    assert free_before - node_free_mb(agent) < 200  # not the 400 MB it tried
    assert 56 <= disk_reading(agent, server_id) <= 66  # the held file counts


def test_120000_small_files_are_all_counted_and_the_limit_still_holds(agent, control_plane):
    server_id = diskhog_running(agent, control_plane, disk_mb=1024)

    assert probe(agent, server_id, "many . 120000", timeout=120) == "120000"
    answer = probe(agent, server_id, "fill deep/hoard.bin 1100", timeout=240)

    assert 1000 <= disk_reading(agent, server_id) <= 1024 * 1.1  # all counted
    assert answer.endswith("No space left on device"), answer
    assert 1000 <= megabytes(answer) <= 1024


def test_the_games_mountinfo_names_nothing_of_the_agents_data_directory(agent, control_plane):
    server_id = diskhog_running(agent, control_plane)

    mountinfo = probe(agent, server_id, "mountinfo", timeout=120)

    assert " /server " in mountinfo and " /game " in mountinfo
    assert str(agent.data_dir) not in mountinfo
    assert probe(agent, server_id, "where", timeout=120) == "/server"


def stopped_diskhog(agent: Agent, plane: ControlPlane, **plan: Any) -> str:
    server_id = diskhog_running(agent, plane, **plan)
    assert agent.request("POST", f"/v1/servers/{server_id}/kill").status_code == 202
    plane.wait_for_report(server_id, "crashed")
    return server_id


def test_a_restore_replaces_the_content_of_a_servers_own_filesystem(agent, control_plane):
    server_id = stopped_diskhog(agent, control_plane, disk_mb=64)
    directory = server_dir(agent, server_id)
    (directory / "world.txt").write_text("the world as it was\n")
    kept = backup(agent, control_plane, server_id)
    (directory / "world.txt").write_text("a world gone wrong\n")
    (directory / "junk.bin").write_bytes(os.urandom(1 << 20))

    restore = started_job(
        agent, server_id, "restore", backup_id=kept["backup_id"], sha256=kept["sha256"]
    )
    assert finished_report(control_plane, server_id, restore["job_id"])["succeeded"] is True

    assert os.path.ismount(directory)
    assert sorted(os.listdir(directory)) == ["world.txt"]
    assert (directory / "world.txt").read_text() == "the world as it was\n"
    assert filesystem_mb(directory) < 70  # still its plan's filesystem


def test_an_incoming_move_lands_on_a_filesystem_of_the_servers_plan(make_agent, control_plane):
    source, target = make_agent(), make_agent()
    source.start()
    target.start()
    server_id = stopped_diskhog(source, control_plane, disk_mb=64)
    (server_dir(source, server_id) / "maps").mkdir()
    (server_dir(source, server_id) / "maps" / "island.txt").write_text("sand\n" * 1000)
    before, token = tree(server_dir(source, server_id)), new_token()
    body = {"token": token, "game": "diskhog", "valid_seconds": 600, "disk_mb": 64}
    assert target.request("POST", f"/v1/transfers/{server_id}", body).status_code == 201

    assert send(source, server_id, target.url, token).status_code == 200
    assert commit(target, server_id).status_code == 200
    assert source.request("DELETE", f"/v1/servers/{server_id}").status_code == 200

    moved = server_dir(target, server_id)
    assert os.path.ismount(moved) and tree(moved) == before
    assert 60 <= filesystem_mb(moved) < 70
    assert mounts_under(source.data_dir / "servers") == []
    assert not (source.data_dir / "disks" / f"{server_id}.img").exists()


def test_a_bigger_plan_at_the_next_start_grows_the_filesystem(agent, control_plane):
    server_id = stopped_diskhog(agent, control_plane, disk_mb=64)
    directory = server_dir(agent, server_id)
    (directory / "world.txt").write_text("kept across the growth\n")

    agent.start_server("diskhog", server_id=server_id, disk_mb=256)
    control_plane.wait_for_report(server_id, "ready")

    assert 256 <= filesystem_mb(directory) < 270
    assert (directory / "world.txt").read_text() == "kept across the growth\n"
    answer = probe(agent, server_id, "fill /server/more.bin 200", timeout=120)
    assert answer == "200 MB"


def test_a_smaller_plan_than_the_content_is_refused_and_the_content_kept(agent, control_plane):
    server_id = stopped_diskhog(agent, control_plane, disk_mb=256)
    directory = server_dir(agent, server_id)
    with open(directory / "world.bin", "wb") as world:
        world.write(os.urandom(100 << 20))

    body = {"game": "diskhog", "port": 1, "memory_mb": 256, "disk_mb": 64}
    answer = agent.request("POST", f"/v1/servers/{server_id}/start", body)

    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "disk_limit_exceeded"
    assert (directory / "world.bin").stat().st_size == 100 << 20
    assert 256 <= filesystem_mb(directory) < 270


def test_a_smaller_plan_shrinks_the_filesystem_when_the_content_fits(agent, control_plane):
    server_id = stopped_diskhog(agent, control_plane, disk_mb=256)
    directory = server_dir(agent, server_id)
    (directory / "world.txt").write_text("small enough\n")

    agent.start_server("diskhog", server_id=server_id, disk_mb=64)
    control_plane.wait_for_report(server_id, "ready")

    assert 60 <= filesystem_mb(directory) < 70
    assert (directory / "world.txt").read_text() == "small enough\n"


def test_a_deleted_server_leaves_no_filesystem_behind(agent, control_plane):
    server_id = stopped_diskhog(agent, control_plane, disk_mb=64)
    image = agent.data_dir / "disks" / f"{server_id}.img"
    assert image.exists() and os.path.ismount(server_dir(agent, server_id))

    assert agent.request("DELETE", f"/v1/servers/{server_id}").status_code == 200

    assert not image.exists() and not server_dir(agent, server_id).exists()
    attached = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=True)
    assert str(image) not in attached.stdout


def test_an_agent_that_comes_back_mounts_its_servers_filesystems_again(make_agent, control_plane):
    agent = make_agent()
    agent.start("--stop-servers-on-exit")
    server_id = new_server_id()
    body = {"game": "demo", "settings": {}}
    put = agent.request("PUT", f"/v1/servers/{server_id}/settings", body)
    assert put.status_code == 200, put.text
    (server_dir(agent, server_id) / "world.txt").write_text("on its own filesystem\n")
    agent.end()
    assert mounts_under(agent.data_dir) == []  # an agent that ends with its games unmounts

    agent.start()

    assert os.path.ismount(server_dir(agent, server_id))
    assert (server_dir(agent, server_id) / "world.txt").read_text() == "on its own filesystem\n"


def test_a_directory_that_held_files_before_gets_its_own_filesystem_with_them(tmp_path: Path):
    tools = find_tools()
    if tools is None or os.geteuid() != 0:
        pytest.skip("a filesystem per server needs root, loop devices and e2fsprogs")
    disks = Disks(tmp_path / "disks", tools)
    disks.prepare()
    directory = tmp_path / "servers" / "srv_before"
    (directory / "saves").mkdir(parents=True)
    (directory / "saves" / "world.sav").write_bytes(b"years of play")
    os.chown(directory / "saves" / "world.sav", 4321, 270042)  # the game's
    os.symlink("saves/world.sav", directory / "latest")

    disks.ensure("srv_before", directory, 64)
    try:
        assert os.path.ismount(directory)
        assert (directory / "saves" / "world.sav").read_bytes() == b"years of play"
        owner = (directory / "saves" / "world.sav").stat()
        assert (owner.st_uid, owner.st_gid) == (4321, 270042)
        assert os.readlink(directory / "latest") == "saves/world.sav"
    finally:
        disks.remove("srv_before", directory)
    assert not directory.exists() and not disks.image("srv_before").exists()


def test_a_first_start_takes_a_blank_filesystem_made_ahead(make_agent, control_plane):
    agent = make_agent()
    agent.env["AGENT_NETWORK_POOL"] = "2"  # as many blanks, made 5 s after the agent starts
    agent.start()
    pool = agent.data_dir / "disks" / "pool"
    blanks = set(wait_until(lambda: len(mounts_under(pool)) >= 2 and mounts_under(pool), 120))

    server_id, _ = agent.start_server("demo")
    control_plane.wait_for_report(server_id, "ready")

    assert os.path.ismount(server_dir(agent, server_id))
    assert len(blanks - set(mounts_under(pool))) == 1  # that one is the server's now
