"""Backups, restores, wipes, reinstalls and settings through a real agent, on real files."""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import signal
import tarfile
import time
from pathlib import Path
from typing import Any

import psutil

from tests.agent.conftest import new_server_id, wait_for_exit
from tests.agent.lines import wait_until

BIG_FILES = 20  # of 10 MB of random bytes: a backup takes seconds, long enough to kill it


def new_id(prefix: str) -> str:
    return f"{prefix}_" + secrets.token_hex(10)


def stopped_demo(agent: Any, control_plane: Any) -> str:
    """A demo server that ran once (its world.dat and settings written), now stopped."""
    server_id, _ = agent.start_server(settings={"motd": "Hello"})
    control_plane.wait_for_report(server_id, "ready")
    pid = agent.game_pid(server_id)
    agent.request("POST", f"/v1/servers/{server_id}/stop")
    control_plane.wait_for_report(server_id, "halted")
    wait_for_exit(pid)
    return server_id


def server_dir(agent: Any, server_id: str) -> Path:
    return agent.data_dir / "servers" / server_id


def archive_of(agent: Any, server_id: str, backup_id: str) -> Path:
    return agent.data_dir / "backups" / server_id / f"{backup_id}.tar.gz"


def job(agent: Any, server_id: str, kind: str, **fields: Any) -> tuple[int, dict[str, Any]]:
    body = {"job_id": new_id("job"), "kind": kind, "game": "demo", **fields}
    answer = agent.request("POST", f"/v1/servers/{server_id}/jobs", body)
    return answer.status_code, {**body, **answer.json()}


def started_job(agent: Any, server_id: str, kind: str, **fields: Any) -> dict[str, Any]:
    status, body = job(agent, server_id, kind, **fields)
    assert status == 202, body
    return body


def finished_report(control_plane: Any, server_id: str, job_id: str, timeout: float = 60.0) -> Any:
    def found() -> Any:
        for report in control_plane.reports_of(server_id):
            if report["kind"] == "job_finished" and report["job_id"] == job_id:
                return report
        return None

    return wait_until(found, timeout)


def backup(agent: Any, control_plane: Any, server_id: str) -> dict[str, Any]:
    status, body = job(agent, server_id, "backup", backup_id=new_id("bkp"))
    assert status == 202, body
    report = finished_report(control_plane, server_id, body["job_id"])
    assert report["succeeded"] is True, report
    return {**report, "backup_id": body["backup_id"]}


def tree(directory: Path) -> dict[str, Any]:
    """Every entry under `directory`: a file's bytes' hash, a link's target, a directory."""
    found: dict[str, Any] = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(root) / name
            relative = str(path.relative_to(directory))
            if path.is_symlink():
                found[relative] = ("link", os.readlink(path))
            elif path.is_dir():
                found[relative] = ("dir",)
            else:
                found[relative] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def populate(directory: Path) -> None:
    (directory / "maps" / "deep").mkdir(parents=True)
    (directory / "maps" / "deep" / "level.bin").write_bytes(os.urandom(300_000))
    (directory / "maps" / "notes.txt").write_text("north is up\n" * 1000)
    (directory / "empty.dat").write_bytes(b"")
    os.symlink("maps/notes.txt", directory / "notes-link")


def populate_big(directory: Path) -> None:
    (directory / "big").mkdir()
    for n in range(BIG_FILES):
        (directory / "big" / f"chunk-{n}.bin").write_bytes(os.urandom(10 * 1024 * 1024))


def test_it_backs_up_and_restores_a_tree_byte_for_byte(agent, control_plane):
    server_id = stopped_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    populate(directory)
    before = tree(directory)

    made = backup(agent, control_plane, server_id)

    archive = archive_of(agent, server_id, made["backup_id"])
    assert made["size_bytes"] == archive.stat().st_size
    assert made["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert archive.stat().st_mode & 0o077 == 0  # games cannot read the archives
    (directory / "maps" / "notes.txt").write_text("rewritten")
    (directory / "maps" / "deep" / "level.bin").unlink()
    (directory / "intruder.txt").write_text("new")
    status, body = job(
        agent, server_id, "restore", backup_id=made["backup_id"], sha256=made["sha256"]
    )
    assert status == 202, body
    assert finished_report(control_plane, server_id, body["job_id"])["succeeded"] is True
    assert tree(directory) == before
    progress = [
        r["progress"]
        for r in control_plane.reports_of(server_id)
        if r["kind"] == "job_progress" and r["job_id"] == body["job_id"]
    ]
    assert progress[0] == 0 and all(0 <= p <= 99 for p in progress)


def test_a_restored_directory_belongs_to_the_game_and_the_game_starts_on_it(agent, control_plane):
    server_id = stopped_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    gid = directory.stat().st_gid
    made = backup(agent, control_plane, server_id)
    body = started_job(
        agent, server_id, "restore", backup_id=made["backup_id"], sha256=made["sha256"]
    )
    assert finished_report(control_plane, server_id, body["job_id"])["succeeded"] is True
    assert (directory.stat().st_gid, directory.stat().st_mode & 0o777) == (gid, 0o770)
    assert {p.stat().st_gid for p in directory.iterdir()} == {gid}
    agent.start_server(server_id=server_id)
    assert control_plane.wait_for_report(server_id, "ready")


def test_a_corrupt_archive_is_refused_and_the_directory_is_untouched(agent, control_plane):
    server_id = stopped_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    made = backup(agent, control_plane, server_id)
    archive = archive_of(agent, server_id, made["backup_id"])
    data = bytearray(archive.read_bytes())
    data[len(data) // 2 :] = os.urandom(len(data) - len(data) // 2)
    archive.write_bytes(bytes(data))
    (directory / "keep.txt").write_text("as it was")
    before = tree(directory)
    corrupt_sha = hashlib.sha256(data).hexdigest()

    body = started_job(agent, server_id, "restore", backup_id=made["backup_id"], sha256=corrupt_sha)

    report = finished_report(control_plane, server_id, body["job_id"])
    assert report["succeeded"] is False and "cannot be extracted" in report["error"]
    assert tree(directory) == before
    assert [p.name for p in directory.parent.iterdir() if p.name.startswith(".")] == []


def test_an_archive_whose_gzip_check_fails_is_refused_and_the_directory_is_untouched(
    agent, control_plane
):
    server_id = stopped_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    made = backup(agent, control_plane, server_id)
    archive = archive_of(agent, server_id, made["backup_id"])
    data = bytearray(archive.read_bytes())
    data[-8] ^= 0xFF  # the CRC-32 of the trailer: tar itself would never read that far
    archive.write_bytes(bytes(data))
    before = tree(directory)

    body = started_job(
        agent,
        server_id,
        "restore",
        backup_id=made["backup_id"],
        sha256=hashlib.sha256(data).hexdigest(),
    )

    report = finished_report(control_plane, server_id, body["job_id"])
    assert report["succeeded"] is False and "cannot be extracted" in report["error"]
    assert tree(directory) == before


def test_a_wrong_checksum_is_refused_and_the_directory_is_untouched(agent, control_plane):
    server_id = stopped_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    made = backup(agent, control_plane, server_id)
    (directory / "world.dat").write_text("changed since")
    before = tree(directory)

    body = started_job(agent, server_id, "restore", backup_id=made["backup_id"], sha256="0" * 64)

    report = finished_report(control_plane, server_id, body["job_id"])
    assert report["succeeded"] is False and "SHA-256" in report["error"]
    assert tree(directory) == before


def test_an_archive_with_paths_leading_out_is_refused(agent, control_plane):
    server_id = stopped_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    backup_id = new_id("bkp")
    archive = archive_of(agent, server_id, backup_id)
    archive.parent.mkdir(exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"out"))
    before = tree(directory)

    body = started_job(
        agent,
        server_id,
        "restore",
        backup_id=backup_id,
        sha256=hashlib.sha256(archive.read_bytes()).hexdigest(),
    )

    assert finished_report(control_plane, server_id, body["job_id"])["succeeded"] is False
    assert not (directory.parent / "escaped.txt").exists()
    assert tree(directory) == before


def test_it_refuses_a_wipe_or_reinstall_while_the_game_runs(agent, control_plane):
    server_id, _ = agent.start_server()
    control_plane.wait_for_report(server_id, "ready")
    for kind in ("wipe", "reinstall"):
        status, body = job(agent, server_id, kind)
        assert status == 409 and body["error"]["code"] == "invalid_state", kind
    assert backup(agent, control_plane, server_id)["succeeded"] is True  # a backup may


def running_demo(agent: Any, control_plane: Any) -> tuple[str, int]:
    """A demo server running with a few files of its own; its id and its game's pid."""
    server_id, _ = agent.start_server(settings={"motd": "Hello"})
    control_plane.wait_for_report(server_id, "ready")
    populate(server_dir(agent, server_id))
    return server_id, agent.game_pid(server_id)


def kinds_after(control_plane: Any, server_id: str, job_id: str) -> list[str]:
    """The kinds of the server's reports from the job's first one on, its progress left out."""
    reports = control_plane.reports_of(server_id)
    first = next(i for i, r in enumerate(reports) if r.get("job_id") == job_id)
    return [r["kind"] for r in reports[first + 1 :] if r["kind"] != "job_progress"]


def test_a_restore_of_a_running_game_stops_it_restores_and_starts_it_again(agent, control_plane):
    server_id, pid = running_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    made = backup(agent, control_plane, server_id)
    before = tree(directory)
    (directory / "maps" / "notes.txt").write_text("rewritten")
    (directory / "maps" / "deep" / "level.bin").unlink()
    (directory / "intruder.txt").write_text("new")

    body = started_job(
        agent, server_id, "restore", backup_id=made["backup_id"], sha256=made["sha256"]
    )

    assert finished_report(control_plane, server_id, body["job_id"])["succeeded"] is True
    ready = wait_until(lambda: control_plane.reports_of(server_id)[-1]["kind"] == "ready", 20)
    assert ready
    assert tree(directory) == before
    assert agent.state_of(server_id) == "running"
    assert agent.game_pid(server_id) != pid and not psutil.pid_exists(pid)
    assert kinds_after(control_plane, server_id, body["job_id"]) == [
        "stopped_by_node", "job_finished", "started_by_node", "ready"
    ]  # fmt: skip


def test_a_corrupt_archive_on_a_running_game_leaves_its_files_and_starts_it_again(
    agent, control_plane
):
    server_id, pid = running_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    made = backup(agent, control_plane, server_id)
    archive = archive_of(agent, server_id, made["backup_id"])
    data = bytearray(archive.read_bytes())
    data[len(data) // 2 :] = os.urandom(len(data) - len(data) // 2)
    archive.write_bytes(bytes(data))
    (directory / "keep.txt").write_text("as it was")

    body = started_job(
        agent, server_id, "restore", backup_id=made["backup_id"],
        sha256=hashlib.sha256(data).hexdigest(),
    )  # fmt: skip

    report = finished_report(control_plane, server_id, body["job_id"])
    assert report["succeeded"] is False and "cannot be extracted" in report["error"]
    ready = wait_until(lambda: control_plane.reports_of(server_id)[-1]["kind"] == "ready", 20)
    assert ready
    assert (directory / "keep.txt").read_text() == "as it was"
    assert (directory / "maps" / "notes.txt").read_text() == "north is up\n" * 1000
    assert agent.state_of(server_id) == "running" and agent.game_pid(server_id) != pid
    assert kinds_after(control_plane, server_id, body["job_id"]) == [
        "stopped_by_node", "job_finished", "started_by_node", "ready"
    ]  # fmt: skip


def test_it_refuses_a_second_job_and_a_start_while_a_restore_runs(agent, control_plane):
    server_id = stopped_demo(agent, control_plane)
    populate_big(server_dir(agent, server_id))
    made = backup(agent, control_plane, server_id)
    status, body = job(
        agent, server_id, "restore", backup_id=made["backup_id"], sha256=made["sha256"]
    )
    assert status == 202

    second, refused = job(agent, server_id, "wipe")
    start = {"game": "demo", "port": 1024 + secrets.randbelow(30000), "memory_mb": 256}
    started = agent.request("POST", f"/v1/servers/{server_id}/start", start)

    assert second == 409 and "restore job" in refused["error"]["message"]
    assert started.status_code == 409
    assert finished_report(control_plane, server_id, body["job_id"])["succeeded"] is True


def test_it_refuses_a_job_of_an_unknown_kind_or_without_its_ids(agent):
    server_id = new_server_id()
    for fields in ({"kind": "explode"}, {"kind": "backup"}, {"kind": "restore",
                   "backup_id": new_id("bkp"), "sha256": "nope"}):  # fmt: skip
        status, body = job(agent, server_id, **fields)  # type: ignore[arg-type]
        assert status == 400 and body["error"]["code"] == "invalid_request"


def test_a_backup_killed_with_the_agent_leaves_no_partial_archive_and_is_reported_failed(
    agent, control_plane
):
    server_id = stopped_demo(agent, control_plane)
    populate_big(server_dir(agent, server_id))
    body = started_job(agent, server_id, "backup", backup_id=new_id("bkp"))
    partial = archive_of(agent, server_id, body["backup_id"]).with_suffix(".gz.partial")
    wait_until(lambda: partial.exists() and partial.stat().st_size > 1_000_000, timeout=30)

    agent.end(signal.SIGKILL)
    agent.start()

    report = finished_report(control_plane, server_id, body["job_id"])
    assert report["succeeded"] is False and "agent stopped" in report["error"]
    assert list((agent.data_dir / "backups" / server_id).iterdir()) == []
    assert not (agent.run_dir(server_id) / "job.json").exists()


def test_a_restore_killed_with_the_agent_leaves_the_old_directory_in_use(agent, control_plane):
    server_id = stopped_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    populate_big(directory)
    made = backup(agent, control_plane, server_id)
    (directory / "big" / "chunk-0.bin").write_bytes(b"changed after the backup")
    (directory / "big" / "chunk-1.bin").unlink()
    before = tree(directory)
    staging = directory.with_name(f".{server_id}.staging")
    body = started_job(
        agent, server_id, "restore", backup_id=made["backup_id"], sha256=made["sha256"]
    )
    wait_until(lambda: staging.exists() and (staging / "big").exists(), timeout=30)

    agent.end(signal.SIGKILL)
    agent.start()

    report = finished_report(control_plane, server_id, body["job_id"])
    assert report["succeeded"] is False
    assert tree(directory) == before
    assert not staging.exists()


def test_a_stop_asked_for_while_a_restore_stops_the_game_keeps_it_stopped(agent, control_plane):
    server_id, _ = agent.start_server(game="stubborn")  # ignores its stop command: 2 s to kill
    control_plane.wait_for_report(server_id, "ready")
    made = backup(agent, control_plane, server_id)
    body = started_job(agent, server_id, "restore", game="stubborn",
                       backup_id=made["backup_id"], sha256=made["sha256"])  # fmt: skip
    wait_until(lambda: agent.state_of(server_id) == "stopping", 10)

    assert agent.request("POST", f"/v1/servers/{server_id}/stop").status_code == 202

    assert finished_report(control_plane, server_id, body["job_id"])["succeeded"] is True
    assert kinds_after(control_plane, server_id, body["job_id"]) == ["halted", "job_finished"]
    assert agent.state_of(server_id) == "stopped"


def test_a_restore_of_a_running_game_killed_with_the_agent_starts_the_old_one_again(
    agent, control_plane
):
    server_id, pid = running_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    populate_big(directory)
    made = backup(agent, control_plane, server_id)
    (directory / "big" / "chunk-1.bin").unlink()
    staging = directory.with_name(f".{server_id}.staging")
    body = started_job(
        agent, server_id, "restore", backup_id=made["backup_id"], sha256=made["sha256"]
    )
    wait_until(lambda: staging.exists() and (staging / "big").exists(), timeout=30)

    agent.end(signal.SIGKILL)
    agent.start()

    assert finished_report(control_plane, server_id, body["job_id"])["succeeded"] is False
    wait_until(lambda: control_plane.reports_of(server_id)[-1]["kind"] == "ready", 20)
    assert not (directory / "big" / "chunk-1.bin").exists() and not staging.exists()
    assert agent.state_of(server_id) == "running" and agent.game_pid(server_id) != pid
    assert kinds_after(control_plane, server_id, body["job_id"]) == [
        "stopped_by_node", "job_finished", "started_by_node", "ready"
    ]  # fmt: skip


def test_wipe_removes_the_templates_wipe_paths_and_keeps_the_rest_and_the_backups(
    agent, control_plane
):
    server_id = stopped_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    populate(directory)
    made = backup(agent, control_plane, server_id)
    assert (directory / "world.dat").exists()

    body = started_job(agent, server_id, "wipe")

    assert finished_report(control_plane, server_id, body["job_id"])["succeeded"] is True
    assert not (directory / "world.dat").exists()
    assert (directory / "server.properties").exists() and (directory / "maps").is_dir()
    assert archive_of(agent, server_id, made["backup_id"]).exists()


def test_wipe_removes_a_link_in_a_wipe_path_not_what_it_points_to(agent, control_plane):
    server_id = stopped_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    outside = agent.data_dir / "precious.txt"
    outside.write_text("keep me")
    (directory / "world.dat").unlink()
    os.symlink(outside, directory / "world.dat")

    body = started_job(agent, server_id, "wipe")

    assert finished_report(control_plane, server_id, body["job_id"])["succeeded"] is True
    assert outside.read_text() == "keep me"
    assert not os.path.lexists(directory / "world.dat")


def test_reinstall_resets_the_directory_to_the_template_and_the_given_settings(
    agent, control_plane
):
    server_id = stopped_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    populate(directory)
    made = backup(agent, control_plane, server_id)
    gid = directory.stat().st_gid

    body = started_job(agent, server_id, "reinstall", settings={"difficulty": "hard"})

    assert finished_report(control_plane, server_id, body["job_id"])["succeeded"] is True
    assert sorted(p.name for p in directory.iterdir()) == ["server.properties"]
    settings = agent.request("GET", f"/v1/servers/{server_id}/settings").json()["settings"]
    assert settings == {"motd": "A gshost demo server", "max-players": "20", "difficulty": "hard"}
    assert (directory.stat().st_gid, directory.stat().st_mode & 0o777) == (gid, 0o770)
    assert archive_of(agent, server_id, made["backup_id"]).exists()
    agent.start_server(server_id=server_id)
    assert control_plane.wait_for_report(server_id, "ready")


def test_put_settings_writes_the_file_of_a_server_that_never_ran(agent):
    server_id = new_server_id()
    body = {"game": "demo", "settings": {"motd": "Fresh", "max-players": 8}}

    answer = agent.request("PUT", f"/v1/servers/{server_id}/settings", body)

    assert answer.status_code == 200
    expected = {"motd": "Fresh", "max-players": "8", "difficulty": "normal"}
    assert answer.json() == {"settings": expected}
    text = (server_dir(agent, server_id) / "server.properties").read_text()
    assert "max-players=8\n" in text
    read = agent.request("GET", f"/v1/servers/{server_id}/settings")
    assert read.json() == {"settings": expected}


def test_put_settings_refuses_an_unknown_setting(agent):
    body = {"game": "demo", "settings": {"gravity": "off"}}
    answer = agent.request("PUT", f"/v1/servers/{new_server_id()}/settings", body)
    assert answer.status_code == 400


def test_a_file_edited_on_the_node_is_what_settings_reads(agent, control_plane):
    server_id = stopped_demo(agent, control_plane)
    path = server_dir(agent, server_id) / "server.properties"
    path.write_text(path.read_text().replace("difficulty=normal", "difficulty=peaceful"))
    settings = agent.request("GET", f"/v1/servers/{server_id}/settings").json()["settings"]
    assert settings["difficulty"] == "peaceful"


def test_an_agent_ended_mid_backup_ends_within_seconds_and_leaves_no_partial_archive(
    agent, control_plane
):
    server_id = stopped_demo(agent, control_plane)
    populate_big(server_dir(agent, server_id))
    body = started_job(agent, server_id, "backup", backup_id=new_id("bkp"))
    partial = archive_of(agent, server_id, body["backup_id"]).with_suffix(".gz.partial")
    wait_until(lambda: partial.exists() and partial.stat().st_size > 1_000_000, timeout=30)

    assert agent.end(signal.SIGTERM, timeout=10) == 0
    agent.start()

    report = finished_report(control_plane, server_id, body["job_id"])
    assert report["succeeded"] is False and "agent stopped" in report["error"]
    assert list((agent.data_dir / "backups" / server_id).iterdir()) == []


def test_freeciv_wipe_removes_its_saves_directory_and_reinstall_writes_its_settings(
    agent, control_plane
):
    server_id = new_server_id()
    written = agent.request(
        "PUT", f"/v1/servers/{server_id}/settings", {"game": "freeciv", "settings": {}}
    )
    assert written.status_code == 200
    directory = server_dir(agent, server_id)
    (directory / "saves").mkdir()
    (directory / "saves" / "freeciv-T0001-Y-4000-manual.sav.gz").write_bytes(b"turn one")

    wipe = started_job(agent, server_id, "wipe", game="freeciv")
    assert finished_report(control_plane, server_id, wipe["job_id"])["succeeded"] is True
    assert sorted(p.name for p in directory.iterdir()) == ["server.serv"]

    reinstall = started_job(agent, server_id, "reinstall", game="freeciv",
                            settings={"maxplayers": 4})  # fmt: skip
    assert finished_report(control_plane, server_id, reinstall["job_id"])["succeeded"]
    assert "set maxplayers 4\n" in (directory / "server.serv").read_text()


def test_the_agents_memory_stays_flat_during_a_backup_of_200_mb(agent, control_plane):
    server_id = stopped_demo(agent, control_plane)
    populate_big(server_dir(agent, server_id))
    process = psutil.Process(agent.process.pid)
    at_rest = process.memory_info().rss
    body = started_job(agent, server_id, "backup", backup_id=new_id("bkp"))
    peak = at_rest
    while not [r for r in control_plane.reports_of(server_id)
               if r["kind"] == "job_finished" and r["job_id"] == body["job_id"]]:  # fmt: skip
        peak = max(peak, process.memory_info().rss)
        time.sleep(0.05)
    assert peak - at_rest < 40 * 2**20  # the archive (200 MB of random bytes) is never held


def test_an_empty_reinstall_leaves_an_empty_directory_and_the_game_starts_on_it(
    agent, control_plane
):
    server_id = stopped_demo(agent, control_plane)
    directory = server_dir(agent, server_id)
    populate(directory)
    made = backup(agent, control_plane, server_id)

    body = started_job(agent, server_id, "reinstall", empty=True)

    assert finished_report(control_plane, server_id, body["job_id"])["succeeded"] is True
    assert list(directory.iterdir()) == []
    assert archive_of(agent, server_id, made["backup_id"]).exists()
    agent.start_server(server_id=server_id, settings={"motd": "Fresh"})
    assert control_plane.wait_for_report(server_id, "ready")
    assert "motd=Fresh" in (directory / "server.properties").read_text()


def test_a_deleted_server_leaves_nothing_on_the_node_its_backups_included(agent, control_plane):
    server_id = stopped_demo(agent, control_plane)
    made = backup(agent, control_plane, server_id)
    assert archive_of(agent, server_id, made["backup_id"]).is_file()

    answer = agent.request("DELETE", f"/v1/servers/{server_id}?backups=remove")

    assert answer.status_code == 200, answer.text
    assert not server_dir(agent, server_id).exists()
    assert not agent.run_dir(server_id).exists()
    assert not (agent.data_dir / "backups" / server_id).exists()


def test_a_deleted_backup_has_its_archive_removed_and_only_that_one(agent, control_plane):
    server_id = stopped_demo(agent, control_plane)
    deleted, kept = backup(agent, control_plane, server_id), backup(agent, control_plane, server_id)

    answer = agent.request("DELETE", f"/v1/servers/{server_id}/backups/{deleted['backup_id']}")

    assert (answer.status_code, answer.json()) == (200, {"removed": True})
    assert not archive_of(agent, server_id, deleted["backup_id"]).exists()
    assert archive_of(agent, server_id, kept["backup_id"]).is_file()
    again = agent.request("DELETE", f"/v1/servers/{server_id}/backups/{deleted['backup_id']}")
    assert again.json() == {"removed": False}


def test_a_server_that_moved_away_keeps_its_backups_on_the_node(agent, control_plane):
    server_id = stopped_demo(agent, control_plane)
    made = backup(agent, control_plane, server_id)

    assert agent.request("DELETE", f"/v1/servers/{server_id}").status_code == 200

    assert not server_dir(agent, server_id).exists()
    assert archive_of(agent, server_id, made["backup_id"]).is_file()


def test_a_server_whose_game_runs_is_not_removed(agent, control_plane):
    server_id, _pid = running_demo(agent, control_plane)

    answer = agent.request("DELETE", f"/v1/servers/{server_id}?backups=remove")

    assert answer.status_code == 409
    assert server_dir(agent, server_id).is_dir()
