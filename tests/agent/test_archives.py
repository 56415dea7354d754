"""The agent's archives on real files, without an agent: what a game may leave in its directory,
a full disk, a job stopped mid-way, and the recovery after an agent killed mid-swap."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gshost_agent import archives


def never(done: int) -> None:
    pass


def throttle(ending: threading.Event | None = None) -> archives.Throttle:
    return archives.Throttle(1, lambda percent: None, ending or threading.Event())


@pytest.fixture
def servers(tmp_path: Path) -> Path:
    directory = tmp_path / "servers"
    (directory / "srv_one").mkdir(parents=True)
    (directory / "srv_one" / "world.dat").write_bytes(os.urandom(50_000))
    return directory


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs: a disk that fills up (root only, as the agent and CI run)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mount
    with contextlib.suppress(subprocess.CalledProcessError):
        subprocess.run(["umount", str(mount)], check=True)


def test_a_link_is_archived_as_a_link_never_read_through(servers: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root's own")
    os.symlink(secret, servers / "srv_one" / "innocent.txt")
    os.mkfifo(servers / "srv_one" / "pipe")
    target = tmp_path / "backup.tar.gz"

    made = archives.write_backup(servers / "srv_one", target, never)

    with tarfile.open(target) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == {"world.dat", "innocent.txt"}  # no FIFO
    assert members["innocent.txt"].issym() and members["innocent.txt"].linkname == str(secret)
    assert made.sha256 == hashlib.sha256(target.read_bytes()).hexdigest()


def test_a_backup_stopped_mid_way_leaves_no_partial_archive(servers: Path, tmp_path: Path) -> None:
    ending = threading.Event()
    ending.set()
    target = tmp_path / "backup.tar.gz"
    with pytest.raises(archives.Cancelled):
        archives.write_backup(servers / "srv_one", target, throttle(ending))
    assert list(tmp_path.glob("backup*")) == []


def test_a_backup_on_a_full_disk_fails_and_leaves_no_partial_archive(
    servers: Path, tiny_disk: Path
) -> None:
    (servers / "srv_one" / "big.bin").write_bytes(os.urandom(4 * 1024 * 1024))
    with pytest.raises(OSError):
        archives.write_backup(servers / "srv_one", tiny_disk / "backup.tar.gz", never)
    assert list(tiny_disk.iterdir()) == []


def test_a_restore_on_a_full_disk_leaves_the_directory_as_it_was(
    tmp_path: Path, tiny_disk: Path
) -> None:
    world = tmp_path / "world"
    world.mkdir()
    (world / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    archive = tmp_path / "backup.tar.gz"
    made = archives.write_backup(world, archive, never)
    server = tiny_disk / "srv_one"
    server.mkdir()
    (server / "world.dat").write_text("as it was")

    with pytest.raises(OSError):
        archives.restore_backup(archive, made.sha256, server, never, None)

    assert [p.name for p in server.iterdir()] == ["world.dat"]
    assert (server / "world.dat").read_text() == "as it was"
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["srv_one"]


def test_recovery_puts_back_a_directory_whose_swap_was_half_done(servers: Path) -> None:
    os.rename(servers / "srv_one", servers / ".srv_one.old")  # killed before the second rename
    (servers / ".srv_one.staging").mkdir()
    archives.recover_directories(servers)
    assert sorted(p.name for p in servers.iterdir()) == ["srv_one"]
    assert (servers / "srv_one" / "world.dat").exists()


def test_recovery_removes_the_old_directory_once_the_new_one_is_in_place(servers: Path) -> None:
    (servers / ".srv_one.old").mkdir()
    (servers / ".srv_one.old" / "stale").write_text("x")
    archives.recover_directories(servers)
    assert sorted(p.name for p in servers.iterdir()) == ["srv_one"]


def test_progress_is_reported_at_most_once_a_second_and_never_100() -> None:
    seen: list[int] = []
    steps = archives.Throttle(1000, seen.append, threading.Event(), seconds=3600)
    for done in range(0, 1001, 100):
        steps(done)
    assert seen == [0]
    quick = archives.Throttle(1000, seen.append, threading.Event(), seconds=0)
    quick(1000)
    assert seen[-1] == 99


def test_a_file_shortened_while_it_is_archived_is_padded_to_the_size_it_had(
    tmp_path: Path,
) -> None:
    path = tmp_path / "world.dat"
    path.write_bytes(b"x" * 10_000)
    descriptor = os.open(path, os.O_RDONLY)
    try:
        reader = archives._ExactReader(descriptor, 10_000)
        first = reader.read(4_000)
        os.truncate(path, 6_000)
        rest = reader.read(10_000)
    finally:
        os.close(descriptor)
    assert first + rest == b"x" * 6_000 + b"\0" * 4_000


def archive_of(source: Path, target: Path, *tar_options: str) -> str:
    """`source`'s content as a tar.gz made by GNU tar; its SHA-256."""
    command = ["tar", *tar_options, "-czf", str(target), "-C", str(source), "."]
    subprocess.run(command, check=True, capture_output=True)
    return hashlib.sha256(target.read_bytes()).hexdigest()


def test_a_link_pointing_outside_is_restored_as_a_link(servers: Path, tmp_path: Path) -> None:
    made = tmp_path / "made"
    made.mkdir()
    (made / "world.dat").write_text("world")
    os.symlink("/etc/passwd", made / "absolute")
    os.symlink("../../elsewhere", made / "escaping")
    sha256 = archive_of(made, tmp_path / "links.tar.gz")

    archives.restore_backup(
        tmp_path / "links.tar.gz", sha256, servers / "srv_one", never, owner=None
    )

    restored = servers / "srv_one"
    assert os.readlink(restored / "absolute") == "/etc/passwd"
    assert os.readlink(restored / "escaping") == "../../elsewhere"
    assert (restored / "world.dat").read_text() == "world"


def test_nothing_is_written_through_a_link_pointing_outside(servers: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    archive = tmp_path / "through.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        link = tarfile.TarInfo("door")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        tar.addfile(link)
        payload = tarfile.TarInfo("door/planted")
        payload.size = 5
        tar.addfile(payload, io.BytesIO(b"owned"))
    sha256 = hashlib.sha256(archive.read_bytes()).hexdigest()
    before = (servers / "srv_one" / "world.dat").read_bytes()

    with pytest.raises(archives.ArchiveError):
        archives.restore_backup(archive, sha256, servers / "srv_one", never, owner=None)

    assert list(outside.iterdir()) == []
    assert (servers / "srv_one" / "world.dat").read_bytes() == before


def test_a_sparse_restore_beyond_the_disk_limit_is_refused(servers: Path, tmp_path: Path) -> None:
    made = tmp_path / "made"
    made.mkdir()
    with open(made / "hole.bin", "wb") as sparse:
        sparse.truncate(2 << 30)  # 2 GiB that take no room: tar -S stores only its data
    sha256 = archive_of(made, tmp_path / "sparse.tar.gz", "--sparse")
    assert (tmp_path / "sparse.tar.gz").stat().st_size < 1 << 20
    before = (servers / "srv_one" / "world.dat").read_bytes()

    with pytest.raises(archives.TooBig):
        archives.restore_backup(
            tmp_path / "sparse.tar.gz", sha256, servers / "srv_one", never, None, 1 << 30
        )

    assert sorted(os.listdir(servers / "srv_one")) == ["world.dat"]
    assert (servers / "srv_one" / "world.dat").read_bytes() == before
    assert sorted(os.listdir(servers)) == ["srv_one"]  # no staging left
