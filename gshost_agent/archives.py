"""A server directory as a compressed tar archive, and back: the work of backup and restore
jobs, done in a worker thread with streaming I/O (never an archive in memory).

A backup is written as `<backup id>.tar.gz.partial`, hashed (SHA-256) as it is written, then
fsynced and renamed: a complete archive has its final name, nothing else does. The directory
belongs to the game, which may swap a file for a link while the agent (root) reads it: every
entry is opened relative to its parent's descriptor without following links, and a link is
archived as a link, never read through.

A restore checks the archive's SHA-256 first, extracts it into a staging directory beside the
server's (the `data` filter of tarfile: no absolute paths, no `..`, no links leading out, no
devices), then swaps the two by renames and removes the old one. Until the second rename the
old directory is the server's; `recover_directories` finishes or undoes a swap an agent killed
half-way left.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import queue
import shutil
import stat
import tarfile
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

CHUNK = 1024 * 1024
QUEUED_CHUNKS = 8
COMPRESS_LEVEL = 6  # as `gzip` and `tar -z`
PARTIAL = ".partial"
STAGING = ".staging"
OLD = ".old"

Progress = Callable[[int], None]  # bytes of the directory done so far


class Swap(Protocol):
    """How a server's new content is staged and then takes the place of the old: a directory
    beside it swapped in by renames (`DirectorySwap`), or a filesystem of its own
    (`gshost_agent.disks.ImageSwap`: a mount point cannot be renamed over)."""

    def make(self, staging: Path) -> None:
        """`staging`, an empty directory the new content goes into."""

    def discard(self, staging: Path) -> None:
        """What `make` made, gone with whatever was put in it."""

    def swap_in(self, staging: Path, directory: Path) -> None:
        """The staged content becomes `directory`'s; the old one is removed."""


class DirectorySwap:
    def make(self, staging: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(mode=0o700)

    def discard(self, staging: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)

    def swap_in(self, staging: Path, directory: Path) -> None:
        swap_in(staging, directory)


RENAMES = DirectorySwap()


class ArchiveError(Exception):
    """The archive is missing, corrupt, or not the one expected; nothing was changed."""


@dataclass(frozen=True)
class Archived:
    size_bytes: int
    sha256: str


def directory_size(directory: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


class _HashingWriter:
    """The archive on its way out: what is written is hashed and counted, then handed to
    `out` (the file, or the upload's parts)."""

    def __init__(self, out: Callable[[memoryview], None]) -> None:
        self.out = out
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        self.hash.update(view)
        self.out(view)
        self.size += len(data)
        return len(data)

    def flush(self) -> None:
        pass


def _write_all(descriptor: int, view: memoryview) -> None:
    while view:
        written = os.write(descriptor, view)
        view = view[written:]


class _Compressor:
    """The tar stream, compressed in a thread of its own (zlib and SHA-256 let go of the GIL
    on large buffers): reading files and compressing them overlap, as `tar | gzip` do. At most
    QUEUED_CHUNKS chunks wait, so memory stays flat. The stream's length is the progress."""

    def __init__(self, target: gzip.GzipFile, progress: Progress) -> None:
        self.target = target
        self.progress = progress
        self.count = 0
        self.error: BaseException | None = None
        self.queue: queue.Queue[bytes | None] = queue.Queue(maxsize=QUEUED_CHUNKS)
        self.thread = threading.Thread(target=self._compress, name="gshost-gzip", daemon=True)
        self.thread.start()

    def write(self, data: bytes) -> int:
        if self.error is not None:
            raise self.error
        self.queue.put(bytes(data))
        self.count += len(data)
        self.progress(self.count)
        return len(data)

    def flush(self) -> None:
        pass

    def _compress(self) -> None:
        try:
            while (chunk := self.queue.get()) is not None:
                self.target.write(chunk)
        except BaseException as error:
            self.error = error
            while self.queue.get() is not None:  # the writer must never wait for room
                pass

    def close(self) -> None:
        """Waits for what is queued to be compressed (and raises what went wrong there)."""
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error


class _ExactReader:
    """A file read as `size` bytes exactly: a game that shortens it meanwhile gets zeros
    after its end, one that grows it is cut at the size taken when it was opened."""

    def __init__(self, descriptor: int, size: int) -> None:
        self.descriptor, self.left = descriptor, size

    def read(self, size: int = CHUNK) -> bytes:
        size = min(size, self.left)
        if size <= 0:
            return b""
        data = os.read(self.descriptor, size)
        while 0 < len(data) < size and (more := os.read(self.descriptor, size - len(data))):
            data += more
        data += b"\0" * (size - len(data))  # the game shortened it meanwhile
        self.left -= size
        return data


def write_backup(
    directory: Path, target: Path, progress: Progress, level: int = COMPRESS_LEVEL
) -> Archived:
    """Archives `directory` as `target` (written as `target.partial`, then renamed)."""
    partial = target.with_name(target.name + PARTIAL)
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        archived = stream_backup(
            directory, lambda view: _write_all(descriptor, view), progress, level
        )
        os.fsync(descriptor)
    except BaseException:
        os.close(descriptor)
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    os.close(descriptor)
    os.replace(partial, target)
    _fsync_directory(target.parent)
    return archived


def stream_backup(
    directory: Path,
    out: Callable[[memoryview], None],
    progress: Progress,
    level: int = COMPRESS_LEVEL,
) -> Archived:
    """Archives `directory` as a stream of compressed bytes handed to `out` as they come
    (never the whole archive at once); its size and SHA-256."""
    writer = _HashingWriter(out)
    gz = gzip.GzipFile(fileobj=writer, mode="wb", compresslevel=level, mtime=0)
    with gz:
        compressor = _Compressor(gz, progress)
        try:
            with tarfile.open(fileobj=compressor, mode="w|", bufsize=CHUNK) as tar:  # type: ignore[call-overload]
                tar.copybufsize = CHUNK
                _add_tree(tar, directory, "")
        finally:
            compressor.close()
    return Archived(size_bytes=writer.size, sha256=writer.hash.hexdigest())


def _add_tree(tar: tarfile.TarFile, directory: Path, prefix: str) -> None:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    descriptor = os.open(directory, flags)
    try:
        _add_entries(tar, descriptor, prefix)
    finally:
        os.close(descriptor)


def _add_entries(tar: tarfile.TarFile, parent: int, prefix: str) -> None:
    with os.scandir(parent) as scan:
        names = sorted(entry.name for entry in scan)
    for name in names:
        arcname = f"{prefix}{name}"
        try:
            status = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            continue  # the game removed it meanwhile
        if stat.S_ISLNK(status.st_mode):
            info = _info(arcname, status, tarfile.SYMTYPE)
            info.linkname = os.readlink(name, dir_fd=parent)
            tar.addfile(info)
        elif stat.S_ISDIR(status.st_mode):
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
            except OSError:
                continue  # swapped for something else meanwhile
            try:
                tar.addfile(_info(arcname, os.fstat(child), tarfile.DIRTYPE))
                _add_entries(tar, child, arcname + "/")
            finally:
                os.close(child)
        elif stat.S_ISREG(status.st_mode):
            _add_file(tar, parent, name, arcname)
        # Sockets, FIFOs and devices a game left are not data: not archived.


def _add_file(tar: tarfile.TarFile, parent: int, name: str, arcname: str) -> None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        descriptor = os.open(name, flags, dir_fd=parent)
    except OSError:
        return  # gone, or swapped for a link, meanwhile
    try:
        status = os.fstat(descriptor)
        if stat.S_ISREG(status.st_mode):
            info = _info(arcname, status, tarfile.REGTYPE)
            info.size = status.st_size
            tar.addfile(info, _ExactReader(descriptor, status.st_size))
    finally:
        os.close(descriptor)


def _info(arcname: str, status: os.stat_result, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(arcname)
    info.type = kind
    info.mode = stat.S_IMODE(status.st_mode)
    info.mtime = int(status.st_mtime)
    info.uid, info.gid = status.st_uid, status.st_gid
    return info


class _CountingReader:
    """The archive file as it is read: the bytes read so far are the progress."""

    def __init__(self, source: IO[bytes], progress: Progress, base: int) -> None:
        self.source, self.progress, self.count = source, progress, base

    def read(self, size: int = CHUNK) -> bytes:
        data = self.source.read(size)
        self.count += len(data)
        self.progress(self.count)
        return data


def file_sha256(path: Path, progress: Progress | None = None) -> str:
    digest = hashlib.sha256()
    done = 0
    with open(path, "rb") as archive:
        while chunk := archive.read(CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done)
    return digest.hexdigest()


class TooBig(ArchiveError):
    """The archive's content exceeds the server's disk limit."""

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(
            f"the archive's content exceeds the server's disk limit ({limit_bytes >> 20} MB)"
        )


def restore_backup(
    archive: Path,
    expected_sha256: str,
    directory: Path,
    progress: Progress,
    owner: tuple[int, int] | None,
    limit_bytes: int | None = None,
    swap: Swap = RENAMES,
) -> None:
    """Replaces `directory` with the archive's content; ArchiveError (the directory as it
    was) when the archive is missing, not the expected one, or cannot be extracted. The
    progress counts the archive's bytes twice: read to check it, then to extract it."""
    try:
        size = archive.stat().st_size
        actual = file_sha256(archive, progress)
    except FileNotFoundError as error:
        raise ArchiveError("the backup's archive is not on this node") from error
    if actual != expected_sha256.lower():
        raise ArchiveError("the archive's SHA-256 is not the backup's")
    with open(archive, "rb") as source:
        reader = _CountingReader(source, progress, size)
        _replace_with(
            directory, owner, lambda staging: _extract(reader, staging, limit_bytes), swap
        )


def restore_stream(
    source: IO[bytes],
    expected: Archived,
    directory: Path,
    progress: Progress,
    owner: tuple[int, int] | None,
    limit_bytes: int | None = None,
    swap: Swap = RENAMES,
) -> None:
    """Replaces `directory` with the content of the archive read from `source` (a download),
    extracted into staging as it comes, hashed and counted meanwhile: only when the whole
    stream has the expected SHA-256 and size is the staging swapped in. ArchiveError, the
    directory as it was, otherwise."""
    reader = _HashingReader(source, progress)
    _replace_with(
        directory,
        owner,
        lambda staging: _extract_checked(reader, staging, expected, limit_bytes),
        swap,
    )


def unpack_stream(
    source: IO[bytes], expected: Archived, staging: Path, limit_bytes: int | None = None
) -> None:
    """The archive read from `source`, extracted into the empty directory `staging` (a
    transfer through the bucket); ArchiveError unless it has the expected SHA-256 and size
    (`staging` is then the caller's to remove)."""
    _extract_checked(_HashingReader(source, lambda done: None), staging, expected, limit_bytes)


def _extract_checked(
    reader: _HashingReader, staging: Path, expected: Archived, limit_bytes: int | None = None
) -> None:
    """Extracted, then read to its end and checked. Changed bytes often break the extraction
    first (gzip's CRC): the SHA-256 is still checked, and named, as the cause."""
    try:
        _extract(reader, staging, limit_bytes)
    except ArchiveError:
        _read_to_end(reader)
        _check(reader, expected)
        raise
    _read_to_end(reader)
    _check(reader, expected)


def _check(reader: _HashingReader, expected: Archived) -> None:
    if reader.count != expected.size_bytes or reader.hash.hexdigest() != expected.sha256:
        raise ArchiveError("the archive's SHA-256 or size is not the backup's")


def _read_to_end(source: _HashingReader) -> None:
    while source.read(CHUNK):  # whatever follows the gzip stream is hashed too
        pass


def _replace_with(
    directory: Path, owner: tuple[int, int] | None, fill: Callable[[Path], None], swap: Swap
) -> None:
    """`fill` puts the new content in a staging directory, which then replaces `directory`."""
    staging = directory.with_name(f".{directory.name}{STAGING}")
    swap.make(staging)
    try:
        fill(staging)
        if owner is not None:
            own(staging, owner)
    except BaseException:
        swap.discard(staging)
        raise
    swap.swap_in(staging, directory)


class _HashingReader:
    """A download as it is read: hashed and counted; the count is the progress."""

    def __init__(self, source: IO[bytes], progress: Progress) -> None:
        self.source, self.progress = source, progress
        self.hash = hashlib.sha256()
        self.count = 0

    def read(self, size: int = CHUNK) -> bytes:
        data = self.source.read(size)
        self.hash.update(data)
        self.count += len(data)
        self.progress(self.count)
        return data


def _extract(
    source: _CountingReader | _HashingReader, staging: Path, limit_bytes: int | None = None
) -> None:
    """A disk error (full, read-only) is no fault of the archive's and goes up as it is.
    Past `limit_bytes` of content (a sparse file counts at its full size, as tar says it),
    TooBig, before the member that would cross it is written."""
    content = 0
    try:
        with gzip.GzipFile(fileobj=source, mode="rb") as compressed:  # type: ignore[call-overload]
            with tarfile.open(fileobj=compressed, mode="r|", bufsize=CHUNK) as tar:
                tar.copybufsize = CHUNK  # type: ignore[attr-defined]  # real, not in the stubs
                for member in tar:
                    content += member.size if member.isfile() else 0
                    if limit_bytes is not None and content > limit_bytes:
                        raise TooBig(limit_bytes)
                    tar.extract(member, staging, filter=_member_filter)
            # tar stops at its end-of-archive blocks; gzip checks its CRC and length only at
            # the end of the stream, so read to it: a corrupt tail is refused too.
            while compressed.read(CHUNK):
                pass
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise ArchiveError(f"the archive cannot be extracted: {error}") from error


def _member_filter(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo | None:
    """tarfile's `data` filter, except that a symbolic link pointing outside the directory is
    restored as the link it was (a game may keep one; inside its sandbox it points nowhere).
    What is written through such a link is still refused: the data filter resolves every
    member's path, links included, and refuses one that leads outside."""
    if member.issym():
        try:
            return tarfile.data_filter(member, destination)
        except (tarfile.AbsoluteLinkError, tarfile.LinkOutsideDestinationError):
            return tarfile.tar_filter(member, destination)
    return tarfile.data_filter(member, destination)


def unpack(archive: Path, staging: Path, limit_bytes: int | None = None) -> None:
    """The archive's content, extracted into the empty directory `staging` (a transfer)."""
    with open(archive, "rb") as source:
        _extract(_CountingReader(source, lambda done: None, 0), staging, limit_bytes)


def own(staging: Path, owner: tuple[int, int]) -> None:
    """Everything the game's (its user, its server's group), as if the game had made it."""
    uid, gid = owner
    for root, dirs, files in os.walk(staging):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, gid)


def swap_in(staging: Path, directory: Path) -> None:
    """`staging` becomes `directory`; the old one is put aside, then removed."""
    old = directory.with_name(f".{directory.name}{OLD}")
    shutil.rmtree(old, ignore_errors=True)
    status = directory.stat() if directory.exists() else None
    if status is not None:
        os.chown(staging, status.st_uid, status.st_gid)
        os.chmod(staging, stat.S_IMODE(status.st_mode))
        os.rename(directory, old)
    os.rename(staging, directory)
    _fsync_directory(directory.parent)
    shutil.rmtree(old, ignore_errors=True)


def recover_directories(servers: Path) -> list[str]:
    """After an agent was killed: staging directories removed, a swap half done undone (the
    old directory back in place) or finished (the old one removed). What it did, for the log."""
    done = []
    for entry in sorted(servers.iterdir()):
        name = entry.name
        if name.startswith(".") and name.endswith(STAGING):
            shutil.rmtree(entry, ignore_errors=True)
            done.append(f"removed {name}")
        elif name.startswith(".") and name.endswith(OLD):
            current = servers / name[1 : -len(OLD)]
            if current.exists():
                shutil.rmtree(entry, ignore_errors=True)
                done.append(f"removed {name}")
            else:
                os.rename(entry, current)
                done.append(f"put {current.name} back")
    return done


def remove_partials(backups: Path) -> list[Path]:
    removed = []
    for partial in backups.glob(f"*/*{PARTIAL}"):
        with contextlib.suppress(OSError):
            partial.unlink()
            removed.append(partial)
    return removed


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class Cancelled(Exception):
    """The agent is ending: the job stops where it is (its partial files are removed)."""


class Throttle:
    """Calls `report(percent)` at most every `seconds`, and never twice with one percent;
    raises Cancelled once `ending` is set."""

    def __init__(
        self,
        total: int,
        report: Callable[[int], None],
        ending: threading.Event,
        seconds: float = 1.0,
    ) -> None:
        self.total, self.report, self.ending, self.seconds = max(total, 1), report, ending, seconds
        self.last_at: float | None = None
        self.last = -1

    def __call__(self, done: int) -> None:
        if self.ending.is_set():
            raise Cancelled()
        now = time.monotonic()
        if self.last_at is not None and now - self.last_at < self.seconds:
            return
        percent = min(99, done * 100 // self.total)
        if percent != self.last:
            self.last_at, self.last = now, percent
            self.report(percent)
