"""An SFTP session's file operations, every one through the server's `Jail`.

asyncssh's own path handling (`map_path`, its `chroot`) is never used: it follows symbolic
links that were in the directory before. Each operation here takes the client's path as a
customer path ("/" is the server directory), checks the scope it needs, and runs the Jail's
method in the SFTP worker threads: read, list, stat and readlink need `files:read`; open for
writing, mkdir, rename and setstat `files:write`; remove and rmdir `files:delete`. Making
links is refused. `map_path` refuses, so a method asyncssh would run on its own fails.

Each change done (a file written and closed, a folder made, a removal, a rename, attributes
set) is told to `noted`, which reports it to the control plane for the audit.

Errors carry the file API's code in their text ("path_outside_server: …"), as SFTPv3 statuses:
no such file, permission denied (outside the server, denied by the template), or failure.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import asyncssh
from asyncssh import SFTPAttrs, SFTPName

from gshost_agent.files.jail import (
    FileDenied,
    FileNotFound,
    Jail,
    JailError,
    JailFile,
    PathOutside,
    parse,
    translate,
)
from gshost_agent.files.spaces import MIB
from gshost_agent.sftp.logins import Login

logger = logging.getLogger("gshost_agent.sftp")

READ, WRITE, DELETE = "files:read", "files:write", "files:delete"
BLOCK = 4096  # the block size statvfs counts in
MAX_READ = 256 * 1024
_T = TypeVar("_T")
_TYPE_BITS = {"directory": stat.S_IFDIR, "symlink": stat.S_IFLNK, "file": stat.S_IFREG}
_FILE_TYPES = {
    "directory": asyncssh.FILEXFER_TYPE_DIRECTORY,
    "symlink": asyncssh.FILEXFER_TYPE_SYMLINK,
    "file": asyncssh.FILEXFER_TYPE_REGULAR,
}


def sftp_error(error: JailError) -> asyncssh.SFTPError:
    text = f"{error.code}: {error.message}"
    if isinstance(error, FileNotFound):
        return asyncssh.SFTPNoSuchFile(text)
    if isinstance(error, PathOutside | FileDenied):
        return asyncssh.SFTPPermissionDenied(text)
    return asyncssh.SFTPFailure(text)


def _path(raw: bytes) -> str:
    try:
        return "/" + raw.decode("utf-8").lstrip("/")
    except UnicodeDecodeError:
        raise asyncssh.SFTPFailure("invalid_path: the path is not UTF-8") from None


def _attrs(entry: Any) -> SFTPAttrs:
    return SFTPAttrs(
        type=_FILE_TYPES.get(entry.type, asyncssh.FILEXFER_TYPE_SPECIAL),
        size=entry.size,
        uid=entry.uid,
        gid=entry.gid,
        permissions=_TYPE_BITS.get(entry.type, 0) | entry.mode,
        atime=int(entry.accessed),
        mtime=int(entry.modified),
    )


class JailedSftp(asyncssh.SFTPServer):
    """One SFTP session of one login, on one server's files."""

    def __init__(
        self,
        chan: asyncssh.SSHServerChannel,
        *,
        login: Login,
        jail: Callable[[], Awaitable[Jail]],
        room: Callable[[Jail], int],
        pool: Executor,
        ended: Callable[[JailedSftp], None],
        noted: Callable[[Login, str, tuple[str, ...]], None],
    ) -> None:
        super().__init__(chan)
        self.login = login
        self._noted = noted
        self._jail_of = jail
        self._room = room  # what may still be written there (blocking)
        self._jail: Jail | None = None
        self._pool = pool
        self._ended = ended
        self._files: set[JailFile] = set()
        self._writing: set[JailFile] = set()  # opened to write: a change once closed
        self.serving = True

    def end(self) -> None:
        """No operation from now on, and the connection closed (a withdrawal covered it)."""
        self.serving = False
        asyncio.get_running_loop().call_soon(self.connection.close)

    # -- the one way to the files -------------------------------------------------------

    async def _run(self, scopes: tuple[str, ...], work: Callable[[Jail], _T]) -> _T:
        if not self.serving:
            raise asyncssh.SFTPPermissionDenied("access_withdrawn")
        missing = [scope for scope in scopes if scope not in self.login.scopes]
        if missing:
            raise asyncssh.SFTPPermissionDenied(f"insufficient_scope: needs {missing[0]}")
        if self._jail is None:
            try:
                self._jail = await self._jail_of()
            except Exception as error:
                logger.warning("%s: no files for SFTP (%s)", self.login.server_id, error)
                raise asyncssh.SFTPFailure("the server's files are not on this node") from None
        jail = self._jail
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, work, jail)
        except JailError as error:
            raise sftp_error(error) from None

    def _open_file(self, file_obj: object) -> JailFile:
        if not self.serving:
            raise asyncssh.SFTPPermissionDenied("access_withdrawn")
        if not isinstance(file_obj, JailFile) or file_obj not in self._files:
            raise asyncssh.SFTPFailure("not an open file of this session")
        return file_obj

    async def _on_file(self, file_obj: object, work: Callable[[int], _T]) -> _T:
        file = self._open_file(file_obj)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, work, file.fileno())
        except OSError as error:
            raise sftp_error(translate(error, file.path)) from None

    def map_path(self, path: bytes) -> bytes:
        raise asyncssh.SFTPPermissionDenied("not served")

    def reverse_map_path(self, path: bytes) -> bytes:
        raise asyncssh.SFTPPermissionDenied("not served")

    # -- paths --------------------------------------------------------------------------

    def realpath(self, path: bytes) -> bytes:
        parts: list[str] = []
        for part in _path(path).split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part not in ("", "."):
                parts.append(part)
        return ("/" + "/".join(parts)).encode("utf-8")

    async def lstat(self, path: bytes) -> SFTPAttrs:
        shown = _path(path)
        return _attrs(await self._run((READ,), lambda jail: jail.stat(shown)))

    async def stat(self, path: bytes) -> SFTPAttrs:
        shown = _path(path)
        entry = await self._run((READ,), lambda jail: jail.stat(shown))
        if entry.type == "symlink":  # a link is never followed
            raise sftp_error(PathOutside("the path is a symbolic link", shown))
        return _attrs(entry)

    async def scandir(self, path: bytes) -> AsyncIterator[SFTPName]:
        shown = _path(path)
        entries = await self._run((READ,), lambda jail: jail.list(shown))
        for entry in entries:
            yield SFTPName(entry.name.encode("utf-8", "surrogateescape"), attrs=_attrs(entry))

    async def readlink(self, path: bytes) -> bytes:
        shown = _path(path)
        target = await self._run((READ,), lambda jail: jail.readlink(shown))
        return target.encode("utf-8", "surrogateescape")

    def symlink(self, oldpath: bytes, newpath: bytes) -> None:
        raise asyncssh.SFTPPermissionDenied("symbolic links cannot be made over SFTP")

    def link(self, oldpath: bytes, newpath: bytes) -> None:
        raise asyncssh.SFTPPermissionDenied("links cannot be made over SFTP")

    async def mkdir(self, path: bytes, attrs: SFTPAttrs) -> None:
        shown, mode = _path(path), (attrs.permissions or 0o755) & 0o777
        await self._run((WRITE,), lambda jail: jail.mkdir(shown, mode=mode))
        self._note("files.directory", shown)

    async def rmdir(self, path: bytes) -> None:
        shown = _path(path)
        await self._run((DELETE,), lambda jail: jail.rmdir(shown))
        self._note("files.delete", shown)

    async def remove(self, path: bytes) -> None:
        shown = _path(path)
        await self._run((DELETE,), lambda jail: jail.remove(shown))
        self._note("files.delete", shown)

    async def rename(self, oldpath: bytes, newpath: bytes) -> None:
        source, target = _path(oldpath), _path(newpath)
        await self._run((WRITE,), lambda jail: jail.rename(source, target))
        self._note("files.rename", source, target)

    async def posix_rename(self, oldpath: bytes, newpath: bytes) -> None:
        source, target = _path(oldpath), _path(newpath)
        await self._run((WRITE,), lambda jail: jail.rename(source, target, replace=True))
        self._note("files.rename", source, target)

    async def setstat(self, path: bytes, attrs: SFTPAttrs) -> None:
        shown = _path(path)
        await self._run((WRITE,), lambda jail: _set_attributes(jail, shown, attrs))
        self._note("files.write", shown)

    def _note(self, change: str, *paths: str) -> None:
        try:
            self._noted(self.login, change, paths)
        except Exception:  # the change is made: a report not kept is logged, not the client's
            logger.exception("%s: an SFTP change not reported", self.login.server_id)

    lsetstat = setstat  # the same: nothing here follows a link

    async def statvfs(self, path: bytes) -> asyncssh.SFTPVFSAttrs:
        """The server's disk as its plan gives it (`df` in a client): `disk_mb` in all, and
        what may still be written."""
        room = await self._run((READ,), self._room)
        return _disk(self.login.disk_mb, room)

    async def fstatvfs(self, file_obj: object) -> asyncssh.SFTPVFSAttrs:
        return await self.statvfs(b"/")

    # -- files --------------------------------------------------------------------------

    async def open(self, path: bytes, pflags: int, attrs: SFTPAttrs) -> JailFile:
        shown = _path(path)
        write = bool(pflags & (asyncssh.FXF_WRITE | asyncssh.FXF_APPEND))
        read = bool(pflags & asyncssh.FXF_READ) or not write
        scopes = (READ,) * read + (WRITE,) * write
        mode = (attrs.permissions or 0o644) & 0o777

        def opened(jail: Jail) -> JailFile:
            return jail.open(
                shown,
                read=read,
                write=write,
                create=bool(pflags & asyncssh.FXF_CREAT),
                truncate=bool(pflags & asyncssh.FXF_TRUNC),
                append=bool(pflags & asyncssh.FXF_APPEND),
                exclusive=bool(pflags & asyncssh.FXF_EXCL),
                mode=mode,
            )

        file = await self._run(scopes, opened)
        self._files.add(file)
        if write:
            self._writing.add(file)
        return file

    def open56(self, path: bytes, desired_access: int, flags: int, attrs: SFTPAttrs) -> None:
        raise asyncssh.SFTPOpUnsupported("SFTP version 3 only")

    async def read(self, file_obj: object, offset: int, size: int) -> bytes:
        # A short read is allowed: at most MAX_READ per request bounds what a client's many
        # parallel requests can make the agent hold.
        length = min(size, MAX_READ)
        cached = _cached(self._open_file(file_obj).fileno(), length, offset)
        if cached is not None:
            return cached
        return await self._on_file(file_obj, lambda fd: os.pread(fd, length, offset))

    async def write(self, file_obj: object, offset: int, data: bytes) -> int:
        def written(fd: int) -> int:
            view, done = memoryview(data), 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], offset + done)
            return done

        return await self._on_file(file_obj, written)

    async def fstat(self, file_obj: object) -> SFTPAttrs:
        found = await self._on_file(file_obj, os.fstat)
        return SFTPAttrs.from_local(found)

    async def fsetstat(self, file_obj: object, attrs: SFTPAttrs) -> None:
        if WRITE not in self.login.scopes:
            raise asyncssh.SFTPPermissionDenied(f"insufficient_scope: needs {WRITE}")
        jail = self._jail
        assert jail is not None  # a file was opened through it

        def changed(fd: int) -> None:
            with jail.credentials():
                _refuse_owner_change(attrs, os.fstat(fd))
                if attrs.size is not None:
                    os.ftruncate(fd, attrs.size)
                if attrs.permissions is not None:
                    os.fchmod(fd, attrs.permissions & 0o777)
                if attrs.atime is not None and attrs.mtime is not None:
                    os.utime(fd, (attrs.atime, attrs.mtime))

        await self._on_file(file_obj, changed)

    async def fsync(self, file_obj: object) -> None:
        await self._on_file(file_obj, os.fsync)

    async def close(self, file_obj: object) -> None:
        if isinstance(file_obj, JailFile) and file_obj in self._files:
            self._files.discard(file_obj)
            try:
                await asyncio.get_running_loop().run_in_executor(self._pool, file_obj.close)
            except JailError as error:
                raise sftp_error(error) from None
            finally:
                self._written(file_obj)

    def _written(self, file: JailFile) -> None:
        if file in self._writing:
            self._writing.discard(file)
            self._note("files.write", file.path)

    def exit(self) -> None:
        for file in list(self._files):
            try:
                file.close()
            except Exception:
                logger.debug("%s: a file did not close", self.login.server_id)
            self._written(file)
        self._files.clear()
        self._ended(self)


def _cached(descriptor: int, length: int, offset: int) -> bytes | None:
    """What the page cache holds of the range, read on the event loop without waiting for
    the disk (RWF_NOWAIT: a thread's hop per request is most of a cached read's cost); None
    when it holds none of it, or the kernel cannot tell: the read goes to a thread."""
    buffer = bytearray(length)
    try:
        got = os.preadv(descriptor, [buffer], offset, os.RWF_NOWAIT)
    except OSError:
        return None  # EAGAIN: not cached; EOPNOTSUPP: not here; any other: the thread says it
    return bytes(memoryview(buffer)[:got])


def _disk(disk_mb: int, room_bytes: int) -> asyncssh.SFTPVFSAttrs:
    blocks, free = disk_mb * MIB // BLOCK, max(0, room_bytes) // BLOCK
    return asyncssh.SFTPVFSAttrs(
        bsize=BLOCK, frsize=BLOCK, blocks=blocks, bfree=free, bavail=free, namemax=255
    )


def _refuse_owner_change(attrs: SFTPAttrs, current: os.stat_result) -> None:
    """What is written belongs to the server's game user: a client may not give it away."""
    if (attrs.uid is not None and attrs.uid != current.st_uid) or (
        attrs.gid is not None and attrs.gid != current.st_gid
    ):
        raise OSError(1, "ownership stays with the server's user")


def _set_attributes(jail: Jail, path: str, attrs: SFTPAttrs) -> None:
    parse(path)
    if attrs.uid is not None or attrs.gid is not None:
        entry = jail.stat(path)
        if (attrs.uid not in (None, entry.uid)) or (attrs.gid not in (None, entry.gid)):
            raise FileDenied("ownership stays with the server's user", path)
    if attrs.size is not None:
        jail.truncate(path, attrs.size)
    if attrs.permissions is not None:
        jail.chmod(path, attrs.permissions & 0o777)
    if attrs.atime is not None and attrs.mtime is not None:
        jail.set_times(path, attrs.atime, attrs.mtime)
