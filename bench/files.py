"""Benchmark: the jailed file layer (gshost_agent.files) against the plain tools, in one run.

- Listing: a directory of 10,000 files listed through `Jail.list` (openat2 resolution, one
  lstat per entry, as the file route does) BENCH_LIST_ROUNDS times (default 50; `--small`:
  20), each round next to the floor's; p50 and p99,
  against `os.scandir` with an lstat per entry on the same directory (the floor).
- Extraction: a .tar.gz of BENCH_EXTRACT_MB megabytes (default 1024; `--small`: 64) of files
  of 1 to 32 MB, half random bytes and half repetitive records, unpacked by
  `gshost_agent.files.archives.extract` (the data filter, the room check, every member written
  through the jail as the server's user) against `tar -xzf` into a fresh directory. Prints
  both times and the jail's throughput over tar's (the goal is at least 0.8).
- SFTP: 1 GiB (`--small`: 64 MiB) uploaded and downloaded through the agent's SFTP and
  through OpenSSH's sftp-server, interleaved (bench/files_sftp.py; the goal is at least 0.5).

Run as root for the server's own uid (as the agent runs); otherwise both run as the caller.
Usage: .venv/bin/python bench/files.py [--small]
"""

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.files_sftp import bench_sftp  # noqa: E402
from gshost_agent.files import archives  # noqa: E402
from gshost_agent.files.jail import Jail  # noqa: E402

LIST_ENTRIES = 10_000
LIST_ROUNDS = int(os.environ.get("BENCH_LIST_ROUNDS", "50"))
SMALL_LIST_ROUNDS = 20
UID = 399_777  # a server's own id, as the agent gives one


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def server_directory(base: Path, name: str) -> tuple[Path, Jail]:
    directory = base / name
    directory.mkdir()
    uid = UID if os.geteuid() == 0 else None
    if uid is not None:
        os.chown(directory, 0, uid)
        os.chmod(directory, 0o770)
    return directory, Jail(directory, uid=uid, gid=uid)


def timed(work: Callable[[], object]) -> float:
    began = time.perf_counter()
    work()
    return time.perf_counter() - began


def bench_listing(base: Path, rounds: int) -> None:
    directory, jail = server_directory(base, "listing")
    folder = directory / "many"
    folder.mkdir()
    for number in range(LIST_ENTRIES):
        (folder / f"file-{number:05d}.dat").write_bytes(b"x")
    if jail.uid is not None:
        os.chown(folder, UID, UID)

    def plain() -> None:
        with os.scandir(folder) as entries:
            [entry.stat(follow_symlinks=False) for entry in entries]

    ours, floor = [], []
    for _ in range(rounds):  # interleaved: both meet the same load
        ours.append(timed(lambda: jail.list("/many")))
        floor.append(timed(plain))
    print(f"listing {LIST_ENTRIES:,} entries, {rounds} rounds")
    print(f"  Jail.list        p50 {percentile(ours, 0.5) * 1000:7.1f} ms"
          f"  p99 {percentile(ours, 0.99) * 1000:7.1f} ms")  # fmt: skip
    print(f"  scandir + lstat  p50 {percentile(floor, 0.5) * 1000:7.1f} ms"
          f"  p99 {percentile(floor, 0.99) * 1000:7.1f} ms")  # fmt: skip
    ratio = statistics.median(floor) / statistics.median(ours)
    print(f"  ratio (p50, scandir over Jail.list): {ratio:.2f}")


def make_archive(path: Path, megabytes: int) -> None:
    record = b"".join(f"chunk {n:06d} biome=plains owner=p{n % 13}\n".encode() for n in range(2000))
    written, number = 0, 0
    with tarfile.open(path, "w:gz", compresslevel=6) as tar:
        while written < megabytes << 20:
            size = min((1 + number % 32) << 20, (megabytes << 20) - written)
            data = os.urandom(size) if number % 2 else (record * (size // len(record) + 1))[:size]
            info = tarfile.TarInfo(f"region-{number % 8}/r.{number}.dat")
            info.size, info.mode = size, 0o644
            tar.addfile(info, io.BytesIO(data))
            written += size
            number += 1


def bench_extraction(base: Path, megabytes: int) -> None:
    archive = base / "world.tar.gz"
    make_archive(archive, megabytes)
    directory, jail = server_directory(base, "extract")
    shutil.copy(archive, directory / "world.tar.gz")
    if jail.uid is not None:
        os.chown(directory / "world.tar.gz", UID, UID)
    plain = base / "plain"
    plain.mkdir()
    tar_seconds = timed(
        lambda: subprocess.run(["tar", "-xzf", str(archive), "-C", str(plain)], check=True)
    )
    room = jail.free_bytes()
    ours = timed(lambda: archives.extract(jail, "/world.tar.gz", "/out", room))
    print(f"extracting a {megabytes} MB .tar.gz ({archive.stat().st_size >> 20} MB compressed)")
    print(
        f"  tar -xzf                      {tar_seconds:6.2f} s  {megabytes / tar_seconds:7.1f} MB/s"
    )
    print(f"  archives.extract (the jail)   {ours:6.2f} s  {megabytes / ours:7.1f} MB/s")
    print(f"  ratio (jail over tar): {tar_seconds / ours:.2f}  (goal >= 0.8)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="a 64 MB archive instead of 1 GiB")
    given = parser.parse_args()
    megabytes = 64 if given.small else int(os.environ.get("BENCH_EXTRACT_MB", "1024"))
    base = Path(tempfile.mkdtemp(prefix="gshost-bench-files-"))
    try:
        bench_listing(base, SMALL_LIST_ROUNDS if given.small else LIST_ROUNDS)
        bench_extraction(base, megabytes)
        bench_sftp(base, 64 if given.small else 1024)  # bench/files_sftp.py
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
