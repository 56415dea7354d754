"""Customers' archives, made and unpacked through a server's Jail (so never through a link).

`compress` writes a `.tar.gz` of some paths: links inside are stored as links, never followed;
a path the denylist names is refused. `extract` unpacks a `.tar.gz`, `.tar` or `.zip` into a
directory: every member is first checked (tarfile's `data` filter for tar; the same rules for
zip: no absolute name, no `..`, no device, fifo or link pointing out), and the members' summed
sizes are compared with the room the server's disk has left, before anything is written. Links
(symbolic or hard) are then dropped rather than made, setuid, setgid and group/other write bits
are cleared, and every file is written as the server's game user.
"""

from __future__ import annotations

import codecs
import gzip  # noqa: F401 (tarfile imports it lazily: see cp437 below)
import os
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from gshost_agent.files.jail import (
    DiskFull,
    Entry,
    FileDenied,
    Jail,
    JailError,
    PathInvalid,
    normalize,
    parse,
)

CHUNK = 1 << 20
# Looked up now: inside a jail's call the thread reads files as the game's user, who may not
# read the interpreter's own (zipfile decodes names it does not know as UTF-8 with cp437).
codecs.lookup("cp437")
# The data filter compares names with a directory path; one that does not exist is enough, as
# every name is resolved again beneath the jail when it is written.
_FILTER_ROOT = "/nonexistent/gshost-extract"
KINDS = (".tar.gz", ".tgz", ".tar", ".zip")


class InvalidArchive(JailError):
    status, code = 400, "invalid_archive"


@dataclass(frozen=True)
class Member:
    name: str  # relative to the directory, normalized
    kind: str  # file, directory or link (dropped)
    size: int
    mode: int


def archive_kind(path: str) -> str:
    lowered = path.lower()
    for kind in KINDS:
        if lowered.endswith(kind):
            return ".tar.gz" if kind == ".tgz" else kind
    raise InvalidArchive("an archive ends in .tar.gz, .tgz, .tar or .zip", path)


def compress(jail: Jail, paths: list[str], archive: str) -> Entry:
    """A .tar.gz at `archive` of `paths` (names relative to their common parent)."""
    if not archive.lower().endswith((".tar.gz", ".tgz")):
        raise PathInvalid("the archive's name ends in .tar.gz", archive)
    entries: list[Entry] = []
    for path in paths:
        top = jail.stat(path)
        if jail.denied(top.path, directory=top.type == "directory"):
            raise FileDenied("the server's template does not allow this path", top.path)
        entries.append(top)
        if top.type == "directory":
            for inner in jail.walk(top.path):
                if jail.denied(inner.path, directory=inner.type == "directory"):
                    raise FileDenied("the server's template does not allow this path", inner.path)
                entries.append(inner)
    base = _common_parent([normalize(path) for path in paths])
    with jail.open_write(archive, atomic=True) as file, tarfile.open(
        fileobj=file, mode="w:gz", compresslevel=6
    ) as tar:  # fmt: skip
        for entry in entries:
            if entry.path == normalize(archive):
                continue
            info = tarfile.TarInfo(entry.path[len(base) :].lstrip("/") or entry.name)
            info.mode, info.mtime = entry.mode & 0o777, int(entry.modified)
            if entry.type == "directory":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif entry.type == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, jail.readlink(entry.path)
                tar.addfile(info)
            elif entry.type == "file":
                with jail.open_read(entry.path) as source:
                    info.size = os.fstat(source.fileno()).st_size
                    tar.addfile(info, _Exactly(source, info.size))
    return jail.stat(archive)


def _common_parent(paths: list[str]) -> str:
    parents = [parse(path)[:-1] for path in paths]
    common: tuple[str, ...] = parents[0] if parents else ()
    for parent in parents[1:]:
        length = 0
        while length < min(len(common), len(parent)) and common[length] == parent[length]:
            length += 1
        common = common[:length]
    return "/" + "/".join(common)


class _Exactly:
    """A file read as at most `size` bytes (a file growing meanwhile keeps the tar valid)."""

    def __init__(self, source: IO[bytes], size: int) -> None:
        self.source, self.left = source, size

    def read(self, count: int = -1) -> bytes:
        count = self.left if count < 0 else min(count, self.left)
        data = self.source.read(count)
        self.left -= len(data)
        return data


def extract(jail: Jail, archive: str, directory: str, room_bytes: int) -> list[str]:
    """The archive unpacked into `directory` (made when missing); the paths written."""
    kind = archive_kind(archive)
    target = normalize(directory)
    # one switch of credentials for the whole extraction: each jail call nests in it
    with jail.credentials(), jail.open_read(_made(jail, target, archive)) as source:
        if kind == ".zip":
            return _extract_zip(jail, source, target, room_bytes)
        mode = "r:gz" if kind == ".tar.gz" else "r:"
        try:
            with tarfile.open(fileobj=source, mode=mode) as tar:  # type: ignore[call-overload]
                return _extract_tar(jail, tar, target, room_bytes)
        except (tarfile.TarError, EOFError, OSError) as error:
            if isinstance(error, OSError) and error.errno is not None:
                raise
            raise InvalidArchive(f"not a readable archive: {error}", archive) from None


def _made(jail: Jail, target: str, archive: str) -> str:
    if target != "/":
        jail.mkdir(target, parents=True)
    if jail.stat(target).type != "directory":
        raise PathInvalid("the target is not a directory", target)
    return archive


def _extract_tar(jail: Jail, tar: tarfile.TarFile, target: str, room_bytes: int) -> list[str]:
    checked: list[tuple[tarfile.TarInfo, Member]] = []
    for info in tar.getmembers():
        if info.name.startswith("/") or info.name.replace("\\", "/").startswith("/"):
            raise InvalidArchive(f"{info.name!r}: an absolute name", info.name)
        try:
            filtered = tarfile.data_filter(info, _FILTER_ROOT)
        except tarfile.FilterError as error:
            raise InvalidArchive(f"{info.name!r}: {error}", info.name) from None
        kind = (
            "directory"
            if filtered.isdir()
            else "file"
            if filtered.isreg()
            else "link"
            if filtered.issym() or filtered.islnk()
            else "other"
        )
        if kind == "other":
            raise InvalidArchive(f"{info.name!r}: not a file, directory or link", info.name)
        checked.append((info, _member(filtered.name, kind, filtered.size, filtered.mode or 0)))
    _check_room(jail, target, [member for _, member in checked], room_bytes)
    written: list[str] = []
    made: set[str] = set()
    for member_info, member in checked:
        if member.kind == "file":
            data = tar.extractfile(member_info)
            assert data is not None
            written.append(_write(jail, target, member, data, made))
        elif member.kind == "directory":
            written.append(_mkdir(jail, target, member, made))
    return written


def _extract_zip(jail: Jail, source: IO[bytes], target: str, room_bytes: int) -> list[str]:
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError) as error:
        raise InvalidArchive(f"not a readable zip: {error}", "") from None
    with archive:
        checked: list[tuple[zipfile.ZipInfo, Member]] = []
        for info in archive.infolist():
            unix = info.external_attr >> 16
            if stat.S_ISLNK(unix):
                kind = "link"
            elif info.is_dir():
                kind = "directory"
            elif stat.S_IFMT(unix) not in (0, stat.S_IFREG):
                raise InvalidArchive(f"{info.filename!r}: not a file or directory", info.filename)
            else:
                kind = "file"
            name = info.filename
            if name.startswith("/") or ("\\" in name and name.replace("\\", "/").startswith("/")):
                raise InvalidArchive(f"{name!r}: an absolute name", name)
            if ".." in name.replace("\\", "/").split("/"):
                raise InvalidArchive(f"{name!r}: a name that leaves the directory", name)
            mode = stat.S_IMODE(unix) or (0o755 if kind == "directory" else 0o644)
            checked.append((info, _member(name, kind, info.file_size, mode)))
        _check_room(jail, target, [member for _, member in checked], room_bytes)
        written: list[str] = []
        made: set[str] = set()
        try:
            for info, member in checked:
                if member.kind == "file":
                    with archive.open(info) as data:
                        written.append(_write(jail, target, member, data, made))
                elif member.kind == "directory":
                    written.append(_mkdir(jail, target, member, made))
        except (zipfile.BadZipFile, EOFError) as error:
            raise InvalidArchive(f"a damaged zip: {error}", "") from None
        return written


def _member(name: str, kind: str, size: int, mode: int) -> Member:
    try:
        relative = "/".join(parse("/" + name))
    except PathInvalid:
        raise InvalidArchive(f"{name!r}: a name that leaves the directory", name) from None
    if not relative and kind != "directory":
        raise InvalidArchive(f"{name!r}: an empty name", name)
    # the data filter's rules, kept for zip too: no setuid/setgid/sticky, no group/other write
    return Member(relative, kind, max(size, 0), mode & 0o755 | (0o600 if kind == "file" else 0o700))


def _check_room(jail: Jail, target: str, members: list[Member], room_bytes: int) -> None:
    needed = sum(-(-member.size // 4096) * 4096 for member in members if member.kind == "file")
    if needed > room_bytes:
        raise DiskFull(
            f"the archive holds {needed} bytes; the server's disk has {max(room_bytes, 0)} left",
            target,
        )
    for member in members:
        path = _inside(target, member.name)
        if jail.denied(path, directory=member.kind == "directory"):
            raise FileDenied("the server's template does not allow this path", path)


def _inside(target: str, name: str) -> str:
    return normalize(f"{target}/{name}")


def _mkdir(jail: Jail, target: str, member: Member, made: set[str]) -> str:
    path = _inside(target, member.name)
    if path != target:
        if path not in made:
            jail.mkdir(path, parents=True)
            made.add(path)
        jail.chmod(path, member.mode)
    return path


def _write(jail: Jail, target: str, member: Member, data: IO[bytes], made: set[str]) -> str:
    path = _inside(target, member.name)
    parent = path.rsplit("/", 1)[0] or "/"
    if parent != "/" and parent not in made:
        jail.mkdir(parent, parents=True)
        made.add(parent)
    with jail.open_write(path, atomic=True) as file:
        for chunk in _chunks(data):
            file.write(chunk)
    jail.chmod(path, member.mode)
    return path


def _chunks(data: IO[bytes]) -> Iterator[bytes]:
    while chunk := data.read(CHUNK):
        yield chunk
