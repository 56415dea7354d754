"""One jailed file layer over a server's directory: every file route, archive job and SFTP session
reads and writes a customer's files through a `Jail`, never through paths of its own.

    jail = Jail(directory, uid=number, gid=number, denylist=template.file_denylist)
    jail.list("/world")                  -> list[Entry]   directories first, then by name
    jail.stat("/a/b")                    -> Entry         the entry itself (a link is a link)
    jail.open_read("/a")                 -> JailFile      a regular file, opened for reading
    jail.open_write("/a", atomic=True)   -> JailFile      atomic: a temporary file beside the
                                          target, renamed over it on close() (discard() drops
                                          it); a reader sees the old or the new content
    jail.open("/a", read=, write=, create=, truncate=, append=, exclusive=)  -> JailFile
    jail.mkdir(p, parents=False)  jail.rename(a, b)  jail.remove(p)  jail.rmdir(p)
    jail.delete(p)  (a file, a link, or a directory and all it holds)
    jail.chmod(p, 0o644)  jail.set_times(p, atime, mtime)  jail.truncate(p, size)
    jail.copy(p) -> str (the copy's path, "name copy.ext" beside it)  jail.readlink(p) -> str
    jail.walk(p) -> Iterator[Entry]   everything beneath p, parents before children, no link
                                      followed
    jail.free_bytes() -> int          room left on the server's filesystem
    normalize(p) -> str               the customer path as the jail reads it ("/a/b")

Paths are the customer's: "/" is the server directory's root as the game sees it. They are
normalized ("." and ".." worked out, repeated slashes dropped); one that leaves the root, holds
NUL or is over 4,096 bytes is `PathInvalid`. Every path is resolved beneath the directory with
`openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (Linux 5.6+), or where that is missing by a walk
of directory descriptors, one component at a time, each opened `O_PATH | O_NOFOLLOW` and
refused unless it is a directory. The last component is then worked on through its parent's
descriptor (`*at` calls, never following it). So no symbolic link is ever followed, whoever made
it (the game, an archive, an SFTP client): a link is listed as one, can be removed or renamed as
itself, and anything that would go through one fails `PathOutside`. The directory itself is
opened afresh for each operation, so a filesystem mounted on it since (a server's disk image) is
the one used.

Denylist: the template's `file_denylist` (gitignore patterns, matched with pathspec's gitignore
matcher) is checked on every path an operation touches, a directory's whole content included
when the operation moves, deletes or copies it: `FileDenied`. Listing shows denied entries.

Credentials: every operation runs with the filesystem uid and gid (setfsuid/setfsgid) and the
supplementary groups of the server's game user, set on the calling thread only (the raw
syscalls are per-thread; glibc's setgroups() would change every thread) and restored before the
call returns. So what is created belongs to the game's user, a file the game cannot write cannot
be written here either, and the kernel's per-server disk limit (gshost_agent/disks.py) answers
ENOSPC: `DiskFull`. Call the methods from a worker thread (`asyncio.to_thread`): a call on the
event loop's thread would also be correct, since no other work runs on a thread while it is in a
call, but it would block the loop. A JailFile is opened with those credentials; its reads and
writes need none (the filesystems have no reserved blocks), so it may be used from any thread.
An agent that is not root (uid None) works with its own credentials. Whatever a call
needs is imported before it: inside a call the thread reads files as the game's user, who may
not read the interpreter's own (a lazy import, a codec looked up, would fail).

Errors are `JailError`s with the HTTP status and code the routes answer with (`status`,
`code`); an OSError of a JailFile's read or write is translated with `translate(error, path)`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import os
import platform
import secrets
import shutil
import stat
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, ParamSpec, TypeVar

import pathspec

from gshost_agent.protocol import InvalidFilePath, file_path_parts

TEMPORARY_PREFIX = ".gshost-write-"
_RESOLVE_NO_XDEV = 0x01
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
_SYSCALLS = {  # openat2, setgroups (the thread's own), renameat2
    "x86_64": (437, 116, 316),
    "aarch64": (437, 159, 276),
}
_SYS_OPENAT2, _SYS_SETGROUPS, _SYS_RENAMEAT2 = _SYSCALLS.get(platform.machine(), (437, -1, -1))
_RENAME_NOREPLACE = 1
_ATTEMPTS = 8  # openat2 answers EAGAIN when a rename raced the walk: try again
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long
_P = ParamSpec("_P")
_R = TypeVar("_R")


class JailError(Exception):
    status = 400
    code = "invalid_path"

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path


class PathInvalid(JailError):
    status, code = 400, "invalid_path"


class PathOutside(JailError):
    status, code = 403, "path_outside_server"


class FileDenied(JailError):
    status, code = 403, "file_denied"


class FileNotFound(JailError):
    status, code = 404, "file_not_found"


class NotADirectory(JailError):
    status, code = 400, "not_a_directory"


class NotAFile(JailError):
    status, code = 400, "not_a_file"


class FileExists(JailError):
    status, code = 409, "file_exists"


class DirectoryNotEmpty(JailError):
    status, code = 409, "directory_not_empty"


class DiskFull(JailError):
    status, code = 409, "disk_limit_exceeded"


_ERRNO_ERRORS: dict[int, tuple[type[JailError], str]] = {
    errno.ELOOP: (PathOutside, "the path goes through a symbolic link"),
    errno.EXDEV: (PathOutside, "the path leads outside the server directory"),
    errno.ENOENT: (FileNotFound, "no such file or directory"),
    errno.ENOTDIR: (NotADirectory, "not a directory"),
    errno.EISDIR: (NotAFile, "is a directory"),
    errno.EEXIST: (FileExists, "already exists"),
    errno.ENOTEMPTY: (DirectoryNotEmpty, "the directory is not empty"),
    errno.ENOSPC: (DiskFull, "the server's disk limit is reached"),
    errno.EDQUOT: (DiskFull, "the server's disk limit is reached"),
    errno.EACCES: (FileDenied, "the server's user may not do this"),
    errno.EPERM: (FileDenied, "the server's user may not do this"),
    errno.EROFS: (FileDenied, "read-only"),
    errno.ENAMETOOLONG: (PathInvalid, "a name is too long"),
    errno.EINVAL: (PathInvalid, "not possible with this path"),
    errno.ENXIO: (NotAFile, "not a regular file"),  # a fifo without a reader
    errno.ETXTBSY: (FileDenied, "the file is in use"),
    errno.EFBIG: (DiskFull, "the file is too large for the server's disk"),
}


def translate(error: OSError, path: str = "") -> JailError:
    """The JailError an OSError of a file operation stands for."""
    kind, message = _ERRNO_ERRORS.get(error.errno or 0, (JailError, ""))
    if kind is JailError:
        failure = JailError(os.strerror(error.errno or 0) if error.errno else str(error), path)
        failure.status, failure.code = 500, "file_error"
        return failure
    return kind(message, path)


def parse(path: str) -> tuple[str, ...]:
    """The components of a customer path beneath the root ("/a/../b" -> ("b",))."""
    try:
        return file_path_parts(path)
    except InvalidFilePath as error:
        raise PathInvalid(str(error), str(path)[:200]) from None


def normalize(path: str) -> str:
    return "/" + "/".join(parse(path))


@dataclass(slots=True)
class Entry:
    name: str
    path: str
    type: str  # file, directory, symlink or other (a fifo, a socket)
    size: int
    mode: int  # the permission bits
    modified: float  # seconds since the epoch
    uid: int = 0
    gid: int = 0
    accessed: float = 0.0

    @classmethod
    def of(cls, path: str, status: os.stat_result, name: str = "") -> Entry:
        mode = status.st_mode
        return cls(
            name or path.rsplit("/", 1)[-1] or "/",
            path,
            _KINDS.get(stat.S_IFMT(mode), "other"),
            status.st_size,
            mode & 0o7777,
            status.st_mtime,
            status.st_uid,
            status.st_gid,
            status.st_atime,
        )

    def to_json(self) -> dict[str, Any]:
        moment = datetime.fromtimestamp(self.modified, UTC)
        return {
            "name": self.name,
            "path": self.path,
            "type": self.type if self.type != "other" else "file",
            "size": self.size,
            "mode": f"{self.mode & 0o7777:04o}",
            "modified_at": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }


_KINDS = {stat.S_IFDIR: "directory", stat.S_IFLNK: "symlink", stat.S_IFREG: "file"}


def _sorted(entries: list[Entry]) -> list[Entry]:
    """Directories first, then by name (two C-speed passes: a 10,000-entry listing)."""
    entries.sort(key=attrgetter("name"))
    return [e for e in entries if e.type == "directory"] + [
        e for e in entries if e.type != "directory"
    ]


_credentials = threading.local()


def _as_owner(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run the method with the server's filesystem credentials on this thread."""

    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        jail = args[0]
        assert isinstance(jail, Jail)
        with jail.credentials():
            return method(*args, **kwargs)

    run.__name__ = method.__name__
    run.__doc__ = method.__doc__
    return run


def _thread_setgroups(groups: list[int]) -> None:
    array = (ctypes.c_uint * max(len(groups), 1))(*groups)
    if _LIBC.syscall(_SYS_SETGROUPS, len(groups), array) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))


def _set_fs_ids(uid: int, gid: int) -> None:
    _LIBC.setfsgid(gid)
    _LIBC.setfsuid(uid)
    if _LIBC.setfsuid(-1) != uid or _LIBC.setfsgid(-1) != gid:
        raise OSError(errno.EPERM, "the filesystem credentials could not be set")


class Jail:
    def __init__(
        self,
        directory: os.PathLike[str] | str,
        *,
        uid: int | None = None,
        gid: int | None = None,
        denylist: Iterable[str] = (),
        use_openat2: bool | None = None,
    ) -> None:
        self.directory = os.fspath(directory)
        self.uid = uid if uid is not None and os.geteuid() == 0 else None
        self.gid = gid if gid is not None else uid
        patterns = [line for line in denylist if line.strip()]
        self.denylist = pathspec.GitIgnoreSpec.from_lines(patterns) if patterns else None
        self.use_openat2 = _openat2_works() if use_openat2 is None else use_openat2

    # -- credentials ---------------------------------------------------------------------

    @contextlib.contextmanager
    def credentials(self) -> Iterator[None]:
        """The server's filesystem credentials on this thread while inside (re-entrant). The
        server directory is opened first, with the agent's own: its parents are the agent's."""
        depth = getattr(_credentials, "depth", 0)
        if depth:
            if _credentials.jail is not self:
                raise RuntimeError("nested calls of two jails on one thread")
            _credentials.depth = depth + 1
            try:
                yield
            finally:
                _credentials.depth = depth
            return
        flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        root = os.open(self.directory, flags)
        groups = os.getgroups() if self.uid is not None else []
        try:
            if self.uid is not None and self.gid is not None:
                _thread_setgroups([self.gid])
                try:
                    _set_fs_ids(self.uid, self.gid)
                except OSError:
                    _set_fs_ids(os.geteuid(), os.getegid())
                    _thread_setgroups(groups)
                    raise
            _credentials.depth, _credentials.jail, _credentials.root = 1, self, root
            try:
                yield
            finally:
                _credentials.depth, _credentials.jail, _credentials.root = 0, None, -1
                if self.uid is not None:
                    _set_fs_ids(os.geteuid(), os.getegid())
                    _thread_setgroups(groups)
        finally:
            os.close(root)

    # -- resolution ----------------------------------------------------------------------

    def _root(self) -> int:
        """A descriptor of the server directory (inside `credentials()`), the caller's own."""
        if getattr(_credentials, "jail", None) is not self:
            raise RuntimeError("a jail's files are reached only inside its credentials()")
        return os.dup(_credentials.root)

    def _directory(self, parts: tuple[str, ...], shown: str) -> int:
        """An O_PATH descriptor of the directory `parts` beneath the root, no link followed."""
        root = self._root()
        if not parts:
            return root
        try:
            if self.use_openat2:
                return _openat2(root, "/".join(parts), os.O_PATH | os.O_DIRECTORY)
            return _walk(root, parts)
        except OSError as error:
            raise translate(error, shown) from None
        finally:
            os.close(root)

    @contextlib.contextmanager
    def _parent(self, path: str) -> Iterator[tuple[int, str, tuple[str, ...]]]:
        """The parent directory's descriptor, the last component's name and all components."""
        parts = parse(path)
        if not parts:
            raise PathInvalid("not possible on the root directory", "/")
        parent = self._directory(parts[:-1], path)
        try:
            yield parent, parts[-1], parts
        finally:
            os.close(parent)

    def _check(self, parts: tuple[str, ...], *, directory: bool = False) -> None:
        if self.denylist is None or not parts:
            return
        relative = "/".join(parts)
        if self.denylist.match_file(relative) or (
            directory and self.denylist.match_file(relative + "/")
        ):
            raise FileDenied("the server's template does not allow this path", "/" + relative)

    def _check_tree(
        self,
        parent: int,
        name: str,
        parts: tuple[str, ...],
        *,
        moved_to: tuple[str, ...] | None = None,
    ) -> None:
        """The denylist over `name` and, when it is a directory, everything it holds, in one
        walk; with `moved_to`, over the paths they would have there too (a folder renamed to
        a name whose contents the denylist names)."""
        places = (parts,) if moved_to is None else (parts, moved_to)
        status = os.stat(name, dir_fd=parent, follow_symlinks=False)
        is_directory = stat.S_ISDIR(status.st_mode)
        for place in places:
            self._check(place, directory=is_directory)
        if self.denylist is None or not is_directory:
            return
        for entry in self._walk_fd(parent, name, "/" + "/".join(parts)):
            inside = parse(entry.path)[len(parts) :]
            for place in places:
                self._check(place + inside, directory=entry.type == "directory")

    def denied(self, path: str, *, directory: bool = False) -> bool:
        try:
            self._check(parse(path), directory=directory)
        except FileDenied:
            return True
        return False

    # -- reading -------------------------------------------------------------------------

    @_as_owner
    def stat(self, path: str) -> Entry:
        parts = parse(path)
        if not parts:
            root = self._directory((), "/")
            try:
                return Entry.of("/", os.fstat(root))
            finally:
                os.close(root)
        with self._parent(path) as (parent, name, parts):
            try:
                return Entry.of(
                    normalize(path), os.stat(name, dir_fd=parent, follow_symlinks=False)
                )
            except OSError as error:
                raise translate(error, path) from None

    @_as_owner
    def list(self, path: str) -> list[Entry]:
        parts = parse(path)
        self._check(parts, directory=True)
        shown = normalize(path)
        if parts:
            with self._parent(path) as (parent, name, _):
                try:
                    directory = _open_directory(parent, name)
                except OSError as error:
                    raise translate(error, path) from None
        else:
            root = self._directory((), "/")
            try:
                directory = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root)
            finally:
                os.close(root)
        try:
            entries = _scan(directory, shown)
        except OSError as error:
            raise translate(error, path) from None
        finally:
            os.close(directory)
        return _sorted(entries)

    @_as_owner
    def walk(self, path: str) -> Iterator[Entry]:
        """Everything beneath `path` (a directory), parents before their children. The walk
        runs now (the listing is returned whole), so it needs no credentials afterwards."""
        parts = parse(path)
        if not parts:
            root = self._directory((), "/")
            try:
                found = list(self._walk_fd(root, ".", "/"))
            finally:
                os.close(root)
            return iter(found)
        with self._parent(path) as (parent, name, _):
            return iter(list(self._walk_fd(parent, name, normalize(path))))

    def _walk_fd(self, parent: int, name: str, shown: str) -> Iterator[Entry]:
        try:
            directory = _open_directory(parent, name)
        except OSError as error:
            raise translate(error, shown) from None
        try:
            entries = _scan(directory, shown)
            for entry in _sorted(entries):
                yield entry
                if entry.type == "directory":
                    yield from self._walk_fd(directory, entry.name, entry.path)
        finally:
            os.close(directory)

    @_as_owner
    def readlink(self, path: str) -> str:
        with self._parent(path) as (parent, name, _):
            try:
                return os.readlink(name, dir_fd=parent)
            except OSError as error:
                raise translate(error, path) from None

    def open_read(self, path: str) -> JailFile:
        return self.open(path, read=True)

    @_as_owner
    def free_bytes(self) -> int:
        root = self._root()
        try:
            found = os.fstatvfs(root)
        finally:
            os.close(root)
        return found.f_bavail * found.f_frsize

    # -- writing -------------------------------------------------------------------------

    def open_write(
        self, path: str, *, atomic: bool = False, append: bool = False, exclusive: bool = False
    ) -> JailFile:
        return self.open(
            path, write=True, create=True, truncate=not append, append=append, exclusive=exclusive,
            atomic=atomic,
        )  # fmt: skip

    @_as_owner
    def open(
        self,
        path: str,
        *,
        read: bool = False,
        write: bool = False,
        create: bool = False,
        truncate: bool = False,
        append: bool = False,
        exclusive: bool = False,
        atomic: bool = False,
        mode: int = 0o644,
    ) -> JailFile:
        """A regular file beneath the root (never a link, a directory, a fifo or a device)."""
        with self._parent(path) as (parent, name, parts):
            self._check(parts)
            shown = normalize(path)
            try:
                if atomic and write:
                    return self._open_atomic(parent, name, shown, mode)
                flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
                flags |= os.O_RDWR if read and write else os.O_WRONLY if write else os.O_RDONLY
                if write:
                    flags |= os.O_CREAT if create else 0
                    flags |= os.O_EXCL if exclusive else 0
                    flags |= os.O_APPEND if append else 0
                descriptor = os.open(name, flags, mode, dir_fd=parent)
                try:
                    _only_regular(descriptor, shown)
                    if write and truncate:
                        os.ftruncate(descriptor, 0)
                    os.set_blocking(descriptor, True)
                except BaseException:
                    os.close(descriptor)
                    raise
                return JailFile(descriptor, shown, mode=_file_mode(read, write))
            except OSError as error:
                raise translate(error, path) from None

    def _open_atomic(self, parent: int, name: str, shown: str, mode: int) -> JailFile:
        try:
            found = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            found = None
        if found is not None:
            if stat.S_ISLNK(found.st_mode):
                raise PathOutside("the path is a symbolic link", shown)
            if not stat.S_ISREG(found.st_mode):
                raise NotAFile("not a regular file", shown)
            mode = stat.S_IMODE(found.st_mode)
        temporary = f"{TEMPORARY_PREFIX}{secrets.token_hex(8)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        descriptor = os.open(temporary, flags, 0o600, dir_fd=parent)
        try:
            os.fchmod(descriptor, mode & 0o777)
            kept_parent = os.dup(parent)
        except BaseException:
            os.close(descriptor)
            os.unlink(temporary, dir_fd=parent)
            raise
        return JailFile(
            descriptor, shown, mode="wb", commit=_Commit(self, kept_parent, temporary, name)
        )

    @_as_owner
    def mkdir(self, path: str, *, parents: bool = False, mode: int = 0o755) -> Entry:
        parts = parse(path)
        self._check(parts, directory=True)
        if parents:
            for depth in range(1, len(parts)):
                with contextlib.suppress(FileExists):
                    self._mkdir_one("/" + "/".join(parts[:depth]), mode)
            with contextlib.suppress(FileExists):
                self._mkdir_one(path, mode)
            found = self.stat(path)
            if found.type != "directory":
                raise FileExists("already exists and is not a directory", found.path)
            return found
        self._mkdir_one(path, mode)
        return self.stat(path)

    def _mkdir_one(self, path: str, mode: int) -> None:
        with self._parent(path) as (parent, name, _):
            try:
                os.mkdir(name, mode & 0o777, dir_fd=parent)
            except OSError as error:
                raise translate(error, path) from None

    @_as_owner
    def rename(self, source: str, target: str, *, replace: bool = False) -> Entry:
        """`source` (a file, a link or a directory, as itself) at `target`; an existing target
        is kept (`FileExists`) unless `replace`."""
        with (
            self._parent(source) as (from_parent, from_name, from_parts),
            self._parent(target) as (to_parent, to_name, to_parts),
        ):
            try:
                self._check_tree(from_parent, from_name, from_parts, moved_to=to_parts)
                if to_parts[: len(from_parts)] == from_parts:
                    raise PathInvalid("a directory cannot move into itself", target)
                if replace:
                    os.rename(from_name, to_name, src_dir_fd=from_parent, dst_dir_fd=to_parent)
                else:
                    _rename_noreplace(from_parent, from_name, to_parent, to_name)
            except OSError as error:
                raise translate(error, source) from None
        return self.stat(target)

    @_as_owner
    def remove(self, path: str) -> None:
        """A file or a link (the link itself)."""
        with self._parent(path) as (parent, name, parts):
            self._check(parts)
            try:
                os.unlink(name, dir_fd=parent)
            except OSError as error:
                raise translate(error, path) from None

    @_as_owner
    def rmdir(self, path: str) -> None:
        """An empty directory."""
        with self._parent(path) as (parent, name, parts):
            self._check(parts, directory=True)
            try:
                os.rmdir(name, dir_fd=parent)
            except OSError as error:
                raise translate(error, path) from None

    @_as_owner
    def delete(self, path: str) -> None:
        """A file, a link, or a directory with all it holds (links inside removed as links)."""
        with self._parent(path) as (parent, name, parts):
            try:
                self._check_tree(parent, name, parts)
                found = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if stat.S_ISDIR(found.st_mode):
                    # shutil's descriptor-based walk: it never follows a link, and refuses a
                    # directory swapped for a link while it works
                    shutil.rmtree(name, dir_fd=parent)
                else:
                    os.unlink(name, dir_fd=parent)
            except OSError as error:
                raise translate(error, path) from None

    @_as_owner
    def chmod(self, path: str, mode: int) -> Entry:
        """The permission bits (setuid, setgid and sticky dropped) of a file or directory."""
        with self._parent(path) as (parent, name, parts):
            self._check(parts)
            try:
                handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
                try:
                    if stat.S_ISLNK(os.fstat(handle).st_mode):
                        raise PathOutside("the path is a symbolic link", path)
                    # the descriptor's own inode, whatever replaces the name meanwhile
                    os.chmod(f"/proc/self/fd/{handle}", mode & 0o777)
                finally:
                    os.close(handle)
            except OSError as error:
                raise translate(error, path) from None
        return self.stat(path)

    @_as_owner
    def set_times(self, path: str, accessed: float, modified: float) -> None:
        with self._parent(path) as (parent, name, parts):
            self._check(parts)
            try:
                os.utime(name, (accessed, modified), dir_fd=parent, follow_symlinks=False)
            except OSError as error:
                raise translate(error, path) from None

    @_as_owner
    def truncate(self, path: str, size: int) -> None:
        with self.open(path, write=True) as file:
            try:
                os.ftruncate(file.fileno(), size)
            except OSError as error:
                raise translate(error, path) from None

    @_as_owner
    def copy(self, path: str) -> Entry:
        """A copy of a file or directory beside it, named "<name> copy<.ext>" (then "copy 2",
        …); links inside a directory are copied as links."""
        with self._parent(path) as (parent, name, parts):
            try:
                self._check_tree(parent, name, parts)
                found = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except OSError as error:
                raise translate(error, path) from None
            if stat.S_ISLNK(found.st_mode):
                raise PathOutside("the path is a symbolic link", path)
            target = _copy_name(parent, name)
            target_path = "/".join(["", *parts[:-1], target])
            self._check(parse(target_path), directory=stat.S_ISDIR(found.st_mode))
            try:
                if stat.S_ISDIR(found.st_mode):
                    _copy_tree(parent, name, parent, target)
                else:
                    _copy_file(parent, name, parent, target)
            except OSError as error:
                with contextlib.suppress(OSError):
                    if stat.S_ISDIR(found.st_mode):
                        shutil.rmtree(target, dir_fd=parent)
                    else:
                        os.unlink(target, dir_fd=parent)
                raise translate(error, path) from None
        return self.stat(target_path)


class _Commit:
    """What makes an atomic write's temporary file the target."""

    def __init__(self, jail: Jail, parent: int, temporary: str, name: str) -> None:
        self.jail, self.parent, self.temporary, self.name = jail, parent, temporary, name

    def finish(self, keep: bool) -> None:
        try:
            with self.jail.credentials():
                if keep:
                    os.rename(
                        self.temporary, self.name, src_dir_fd=self.parent, dst_dir_fd=self.parent
                    )
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.temporary, dir_fd=self.parent)
        finally:
            os.close(self.parent)


class JailFile(io.FileIO):
    """A file opened by a Jail. Reads and writes raise JailErrors (DiskFull at the disk
    limit). An atomic write's content replaces the target on close(); discard() drops it, and
    leaving a `with` block on an exception discards it too."""

    def __init__(self, descriptor: int, path: str, *, mode: str, commit: _Commit | None = None):
        super().__init__(descriptor, mode, closefd=True)
        self.path = path
        self._commit = commit

    def read(self, size: int = -1, /) -> bytes:  # type: ignore[override]
        try:
            return super().read(size) or b""
        except OSError as error:
            raise translate(error, self.path) from None

    def write(self, data: Any, /) -> int:
        try:
            view = memoryview(data)
            written = 0
            while written < len(view):
                count = super().write(view[written:])
                written += count or 0
            return written
        except OSError as error:
            raise translate(error, self.path) from None

    def discard(self) -> None:
        commit, self._commit = self._commit, None
        super().close()
        if commit is not None:
            commit.finish(keep=False)

    def close(self) -> None:
        commit, self._commit = self._commit, None
        if commit is None:
            super().close()
            return
        try:
            super().close()
        except OSError as error:
            commit.finish(keep=False)
            raise translate(error, self.path) from None
        try:
            commit.finish(keep=True)
        except OSError as error:
            raise translate(error, self.path) from None

    def __del__(self) -> None:
        if getattr(self, "_commit", None) is not None:  # never kept without a close()
            with contextlib.suppress(Exception):
                self.discard()
        super().__del__()

    def __exit__(self, kind: object, value: object, trace: object) -> None:
        if kind is not None:
            self.discard()
        else:
            self.close()


def _file_mode(read: bool, write: bool) -> str:
    if read and write:
        return "r+b"
    return "wb" if write else "rb"


def _only_regular(descriptor: int, shown: str) -> None:
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        raise NotAFile("not a regular file", shown)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _openat2(directory: int, path: str, flags: int) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE)
    encoded = os.fsencode(path)
    for _ in range(_ATTEMPTS):
        found = _LIBC.syscall(
            _SYS_OPENAT2, directory, encoded, ctypes.byref(how), ctypes.sizeof(how)
        )
        if found >= 0:
            return int(found)
        number = ctypes.get_errno()
        if number not in (errno.EAGAIN, errno.EINTR):
            raise OSError(number, os.strerror(number), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


def _walk(root: int, parts: tuple[str, ...]) -> int:
    """The fallback: one component at a time, each refused unless it is a directory."""
    current = os.dup(root)
    try:
        for part in parts:
            following = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
            kind = os.fstat(following).st_mode
            os.close(current)
            current = following
            if stat.S_ISLNK(kind):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), part)
            if not stat.S_ISDIR(kind):
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), part)
        return current
    except BaseException:
        os.close(current)
        raise


_openat2_checked: list[bool] = []


def _openat2_works() -> bool:
    if not _openat2_checked:
        try:
            os.close(_openat2(os.open("/", os.O_PATH | os.O_CLOEXEC), ".", os.O_PATH))
            _openat2_checked.append(True)
        except OSError:
            _openat2_checked.append(False)
    return _openat2_checked[0]


def _open_directory(parent: int, name: str) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=parent)
    except NotADirectoryError:
        if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise


def _scan(directory: int, shown: str) -> list[Entry]:
    prefix = shown.rstrip("/")
    found = []
    with os.scandir(directory) as entries:
        for entry in entries:
            try:
                status = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # gone meanwhile
                continue
            found.append(Entry.of(f"{prefix}/{entry.name}", status, entry.name))
    return found


def _rename_noreplace(from_parent: int, from_name: str, to_parent: int, to_name: str) -> None:
    result = _LIBC.syscall(
        _SYS_RENAMEAT2,
        from_parent,
        os.fsencode(from_name),
        to_parent,
        os.fsencode(to_name),
        _RENAME_NOREPLACE,
    )
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number), to_name)


def _copy_name(parent: int, name: str) -> str:
    stem, dot, extension = name.partition(".") if not name.startswith(".") else (name, "", "")
    for number in range(1, 1000):
        suffix = " copy" if number == 1 else f" copy {number}"
        candidate = f"{stem}{suffix}{dot}{extension}"
        try:
            os.stat(candidate, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return candidate
    raise FileExists("too many copies", name)


def _copy_file(from_parent: int, from_name: str, to_parent: int, to_name: str) -> None:
    source = os.open(from_name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=from_parent)
    try:
        found = os.fstat(source)
        if not stat.S_ISREG(found.st_mode):
            raise OSError(errno.EISDIR, "not a regular file", from_name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        target = os.open(to_name, flags, 0o600, dir_fd=to_parent)
        try:
            remaining = found.st_size
            while remaining > 0:
                copied = os.copy_file_range(source, target, min(remaining, 1 << 30))
                if copied == 0:
                    break
                remaining -= copied
            os.fchmod(target, stat.S_IMODE(found.st_mode) & 0o777)
        finally:
            os.close(target)
    finally:
        os.close(source)


def _copy_tree(from_parent: int, from_name: str, to_parent: int, to_name: str) -> None:
    source = _open_directory(from_parent, from_name)
    try:
        mode = stat.S_IMODE(os.fstat(source).st_mode) & 0o777
        os.mkdir(to_name, 0o700, dir_fd=to_parent)
        target = _open_directory(to_parent, to_name)
        try:
            with os.scandir(source) as entries:
                for entry in entries:
                    kind = entry.stat(follow_symlinks=False).st_mode
                    if stat.S_ISDIR(kind):
                        _copy_tree(source, entry.name, target, entry.name)
                    elif stat.S_ISLNK(kind):
                        link = os.readlink(entry.name, dir_fd=source)
                        os.symlink(link, entry.name, dir_fd=target)
                    elif stat.S_ISREG(kind):
                        _copy_file(source, entry.name, target, entry.name)
            os.fchmod(target, mode)
        finally:
            os.close(target)
    finally:
        os.close(source)
