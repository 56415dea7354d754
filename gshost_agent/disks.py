"""Each sandboxed server's directory on a filesystem of its own, so that the kernel enforces its
plan's `disk_mb`: an ext4 image per server, loop-mounted on `<data>/servers/<id>/`.

    <data>/disks/                 0700 root: the images, nothing a game reaches
    <data>/disks/<id>.img         the server's filesystem: a sparse file (it costs what is
                                  written), mounted nodev, nosuid on its directory
    <data>/disks/<where>-<name>.img   a restore's or an incoming move's content, mounted on
                                  its staging directory until it replaces the server's
    <data>/disks/pool-<n>.img     blank filesystems of the default plan made ahead, mounted
                                  on <data>/disks/pool/<n>/: a server's first start takes one
                                  (a rename and a move of its mount: no mkfs on the way)

Writes past the limit fail with ENOSPC whatever holds the blocks (a file deleted but kept open,
a million small files: the inode table is part of the image), and the reading is the
filesystem's own count (statvfs), at any number of files. The image is sized so that its
usable space is `disk_mb` (`image_bytes`); a start with another `disk_mb` grows it, or shrinks
it when the content fits (offline: the game is stopped at a start). Every helper runs with a
fixed environment from `/`, never with anything a game or a template controls.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from gshost_agent.server_state import DiskLimitExceeded

TOOLS = ("mkfs.ext4", "e2fsck", "resize2fs", "mount", "umount", "losetup")
IMAGE = ".img"
STAGING = ".staging"
BLOCK_BYTES = 4096
BYTES_PER_INODE = 8192  # a million small files fit from disk_mb 8,000 on; fewer: ENOSPC
JOURNAL_FROM_MB = 32  # smaller filesystems have no room for the smallest journal
JOURNAL_MB = 4  # ext4's least with 4 KiB blocks; mke2fs would give a 10 GB image 64 MB
# noinit_itable: the image is sparse, its unwritten inode tables already read as zeros, and the
# kernel's background zeroing would cost real space. discard: a deleted file's blocks go back
# to the node's disk.
MOUNT_OPTIONS = "loop,nodev,nosuid,noinit_itable,discard"
HELPER_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
HELPER_SECONDS = 120
RELEASE_SECONDS = 3.0  # a loop device is let go of a moment after its filesystem's unmount
GAMES_TMPFS = "size=256m,mode=0755,nodev,nosuid"
POOL = "pool"
MS_MOVE = 8192  # mount(2): a mounted filesystem moved to another mount point, as it is
# Blanks are made only while none was taken for a minute: never during a burst of starts and
# what follows it (the games' own start, their first players), whose work would wait behind
# mkfs for the node's cores; an agent that has just started makes its first after 5 s.
REFILL_QUIET_SECONDS = 60.0
REFILL_FIRST_SECONDS = 5.0
_LIBC = ctypes.CDLL(None, use_errno=True)


class DiskError(RuntimeError):
    """A server's filesystem could not be made, mounted or resized."""


def find_tools() -> dict[str, str] | None:
    """Each disk tool's path, or None when one is missing or the node has no loop devices."""
    found = {name: shutil.which(name, path=HELPER_ENV["PATH"]) for name in TOOLS}
    if any(path is None for path in found.values()) or not Path("/dev/loop-control").exists():
        return None
    return {name: str(path) for name, path in found.items()}


def image_bytes(disk_mb: int) -> int:
    """An image whose usable space is `disk_mb` (within 2 %): ext4 keeps its inode tables,
    journal and group descriptors (about 4 % and the journal) beside the content."""
    journal = JOURNAL_MB << 20 if disk_mb >= JOURNAL_FROM_MB else 0
    raw = (disk_mb << 20) * 104 // 100 + journal
    return -(-raw // (1 << 16)) << 16  # whole 64 KiB


def used_mb(mount_point: Path) -> float:
    """What the server's filesystem holds (its used blocks), whatever the number of files."""
    found = os.statvfs(mount_point)
    return round((found.f_blocks - found.f_bfree) * found.f_frsize / (1 << 20), 2)


def mounted(path: Path) -> bool:
    return os.path.ismount(path)


class Disks:
    """The node's server filesystems: made, mounted, resized, replaced and removed by name."""

    def __init__(self, root: Path, tools: Mapping[str, str]) -> None:
        self.root = root
        self.tools = dict(tools)
        # One change at a time (the event loop's and the job threads'): a settings write must
        # never mount a filesystem that a start has just unmounted to resize it.
        self.changing = threading.RLock()
        self.ending = threading.Event()  # the agent ends: no blank filesystem made any more
        # When a start last took a blank filesystem (time.monotonic).
        self.taken_at = time.monotonic() - REFILL_QUIET_SECONDS + REFILL_FIRST_SECONDS

    def prepare(self) -> None:
        self.root.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.root, 0o700)

    def image(self, name: str) -> Path:
        return self.root / f"{name}{IMAGE}"

    def has(self, name: str) -> bool:
        return self.image(name).is_file()

    # Making and mounting ----------------------------------------------------------------------

    def ensure(self, name: str, mount_point: Path, disk_mb: int) -> None:
        """The server's filesystem, made when it has none, mounted when it is not. A directory
        that already held files without one (an agent before images) has them moved in."""
        with self.changing:
            self._ensure(name, mount_point, disk_mb)

    def _ensure(self, name: str, mount_point: Path, disk_mb: int) -> None:
        mount_point.mkdir(mode=0o700, exist_ok=True)
        if mounted(mount_point):
            return
        if self.has(name):
            self.mount(name, mount_point, check=True)
            return
        if not any(mount_point.iterdir()):
            if not self._take_blank(name, mount_point, disk_mb):
                self.make(name, mount_point, disk_mb)
            return
        staging = mount_point.with_name(f".{mount_point.name}{STAGING}")
        self.make_staging(staging, disk_mb)
        shutil.copytree(mount_point, staging, symlinks=True, dirs_exist_ok=True)
        _copy_owners(mount_point, staging)
        for entry in mount_point.iterdir():  # not left hidden under the mount
            _remove_directory(entry)
        self.replace(staging, name, mount_point)

    def make(self, name: str, mount_point: Path, disk_mb: int) -> None:
        image = self.image(name)
        temporary = image.with_name(f".{image.name}.new")
        self._new_image(temporary, disk_mb)
        os.replace(temporary, image)
        self.mount(name, mount_point)

    def _new_image(self, path: Path, disk_mb: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(descriptor, image_bytes(disk_mb))
        finally:
            os.close(descriptor)
        journal = ["-J", f"size={JOURNAL_MB}"] if disk_mb >= JOURNAL_FROM_MB else []
        journal = journal or ["-O", "^has_journal"]
        lazy = "lazy_itable_init=1,lazy_journal_init=1,nodiscard"
        blocks = ["-b", str(BLOCK_BYTES), "-i", str(BYTES_PER_INODE), "-m", "0"]
        try:
            self._run("mkfs.ext4", "-q", "-F", *blocks, *journal, "-E", lazy, str(path))
        except DiskError:
            path.unlink()
            raise

    def mount(self, name: str, mount_point: Path, *, check: bool = False) -> None:
        """`check`: an image not mounted since the node started is checked first (a reboot,
        a power cut: the journal replayed, or a small unjournaled one repaired)."""
        image = self.image(name)
        if check:
            self._run("e2fsck", "-p", str(image), accept=(0, 1))
        mount_point.mkdir(mode=0o700, exist_ok=True)
        self._run("mount", "-o", MOUNT_OPTIONS, str(image), str(mount_point))
        lost = mount_point / "lost+found"  # e2fsck's, not the game's: an empty directory
        with contextlib.suppress(OSError):
            lost.rmdir()

    def unmount(self, mount_point: Path, *, lazy: bool = True) -> None:
        """`lazy`: a filesystem someone still holds (a shell in it) is detached now and
        released when let go; else DiskError."""
        if not mounted(mount_point):
            return
        try:
            self._run("umount", str(mount_point))
        except DiskError:
            if not lazy:
                raise
            self._run("umount", "-l", str(mount_point))

    # Blank filesystems made ahead -------------------------------------------------------------

    def pooled(self) -> list[Path]:
        """The mount points of the blank filesystems ready to be taken."""
        pool = self.root / POOL
        return sorted(e for e in pool.iterdir() if mounted(e)) if pool.is_dir() else []

    def refill(self, count: int, disk_mb: int) -> int:
        """Blank filesystems of `disk_mb` made until `count` wait, while the node is at rest
        (outside the lock: a start meanwhile makes its own). How many it made."""
        made = 0
        (self.root / POOL).mkdir(mode=0o700, exist_ok=True)
        while len(self.pooled()) < count and not self.ending.is_set() and self._at_rest():
            number = max([int(p.name) for p in (self.root / POOL).iterdir()] or [0]) + 1
            mount_point = self.root / POOL / str(number)
            mount_point.mkdir(mode=0o700)
            self._new_image(self.image(f"{POOL}-{number}"), disk_mb)
            with self.changing:
                if self.ending.is_set():
                    break
                self.mount(f"{POOL}-{number}", mount_point)
            made += 1
        return made

    def _at_rest(self) -> bool:
        return time.monotonic() - self.taken_at > REFILL_QUIET_SECONDS

    def rest_in(self) -> float:
        """Seconds until the node is at rest (no blank taken for REFILL_QUIET_SECONDS)."""
        return max(0.0, self.taken_at + REFILL_QUIET_SECONDS - time.monotonic())

    def _take_blank(self, name: str, mount_point: Path, disk_mb: int) -> bool:
        """A blank filesystem of `disk_mb` from the pool, now the server's; False: none."""
        self.taken_at = time.monotonic()
        for blank in self.pooled():
            image = self.image(f"{POOL}-{blank.name}")
            if not image.is_file() or image.stat().st_size != image_bytes(disk_mb):
                continue
            os.replace(image, self.image(name))  # its loop device follows the file
            try:
                _move_mount(blank, mount_point)
            except OSError:  # a shared mount cannot be moved: mounted again instead
                self.unmount(blank)
                self.mount(name, mount_point)
            blank.rmdir()
            return True
        return False

    def _drain_pool(self) -> None:
        pool = self.root / POOL
        for entry in sorted(pool.iterdir()) if pool.is_dir() else []:
            self.unmount(entry)
            with contextlib.suppress(FileNotFoundError):
                self.image(f"{POOL}-{entry.name}").unlink()
            _remove_directory(entry)

    # Plans ------------------------------------------------------------------------------------

    def fit(self, name: str, mount_point: Path, disk_mb: int) -> None:
        """The stopped server's filesystem sized for `disk_mb`: grown, or shrunk when its
        content fits; DiskLimitExceeded (nothing changed) when it does not."""
        with self.changing:
            self._fit(name, mount_point, disk_mb)

    def _fit(self, name: str, mount_point: Path, disk_mb: int) -> None:
        self._ensure(name, mount_point, disk_mb)
        image = self.image(name)
        wanted, size = image_bytes(disk_mb), image.stat().st_size
        if wanted == size:
            return
        held = used_mb(mount_point)
        if wanted < size and held > disk_mb:
            raise DiskLimitExceeded(held, disk_mb)
        self.unmount(mount_point, lazy=False)  # resized only where nothing else holds it
        try:
            self._wait_released(image)
            self._resize(image, wanted, size)
        except DiskError as error:
            if wanted > size:
                raise
            raise DiskLimitExceeded(held, disk_mb) from error
        finally:
            self.mount(name, mount_point)

    def _wait_released(self, image: Path) -> None:
        deadline = time.monotonic() + RELEASE_SECONDS
        while self._attached(image):
            if time.monotonic() > deadline:
                raise DiskError(f"{image.name} is still in use: not resized")
            time.sleep(0.05)

    def _attached(self, image: Path) -> bool:
        result = subprocess.run(  # noqa: S603 (an argument list of the agent's own)
            [self.tools["losetup"], "-j", str(image)],
            env=HELPER_ENV,
            cwd="/",
            capture_output=True,
            text=True,
            check=False,
        )
        return bool(result.stdout.strip())

    def _resize(self, image: Path, wanted: int, size: int) -> None:
        self._run("e2fsck", "-f", "-p", str(image), accept=(0, 1))
        if wanted > size:
            os.truncate(image, wanted)
            self._run("resize2fs", str(image))
            return
        self._run("resize2fs", str(image), f"{wanted // BLOCK_BYTES}")
        os.truncate(image, wanted)

    # Replacing the content (restores, incoming moves) -----------------------------------------

    def staging_name(self, staging: Path) -> str:
        """`<where>-<name>`: never `srv_…`, the servers' own images."""
        return f"{staging.parent.name}-{staging.name.strip('.')}"

    def make_staging(self, staging: Path, disk_mb: int) -> None:
        """An empty filesystem of `disk_mb` mounted on the directory `staging`."""
        with self.changing:
            self.discard_staging(staging)
            staging.mkdir(mode=0o700)
            self.make(self.staging_name(staging), staging, disk_mb)

    def discard_staging(self, staging: Path) -> None:
        with self.changing:
            self._discard_staging(staging)

    def _discard_staging(self, staging: Path) -> None:
        self.unmount(staging)
        with contextlib.suppress(FileNotFoundError):
            self.image(self.staging_name(staging)).unlink()
        _remove_directory(staging)

    def replace(self, staging: Path, name: str, mount_point: Path) -> None:
        """The filesystem mounted on `staging` becomes the server's, on `mount_point`, with the
        owner and mode its directory had. Until the image's rename the old one is the
        server's; after it, the new one (an agent killed in between remounts that one)."""
        with self.changing:
            self._replace(staging, name, mount_point)

    def _replace(self, staging: Path, name: str, mount_point: Path) -> None:
        status = mount_point.stat() if mounted(mount_point) else None
        self.unmount(staging)
        _remove_directory(staging)
        self.unmount(mount_point)
        mount_point.mkdir(mode=0o700, exist_ok=True)
        os.replace(self.image(self.staging_name(staging)), self.image(name))
        _fsync_directory(self.root)
        self.mount(name, mount_point)
        if status is not None:
            os.chown(mount_point, status.st_uid, status.st_gid)
            os.chmod(mount_point, status.st_mode & 0o7777)

    def remove(self, name: str, mount_point: Path) -> None:
        """The server's filesystem gone: unmounted, its image deleted, its directory removed."""
        with self.changing:
            self.unmount(mount_point)
            with contextlib.suppress(FileNotFoundError):
                self.image(name).unlink()
            _remove_directory(mount_point)

    # The node's start and end -----------------------------------------------------------------

    def recover(self, servers: Path, stagings: list[Path]) -> list[str]:
        """After an agent ended or the node rebooted: the staging filesystems an interrupted
        job or move left (`stagings`, the directories they may be mounted on) removed, and
        every server's image mounted again. What it did, for the log."""
        done = []
        for staging in stagings:
            if mounted(staging):
                self.unmount(staging)
                done.append(f"unmounted the staging filesystem {staging}")
        for image in sorted(self.root.glob(f"*{IMAGE}")):
            pooled = image.name.startswith(f"{POOL}-")
            if pooled and mounted(self.root / POOL / image.name[len(POOL) + 1 : -len(IMAGE)]):
                continue  # blank, made by an earlier agent: still good
            if not image.name.startswith("srv_"):
                image.unlink()
                done.append(f"removed {image.name}")
        pool = self.root / POOL
        for entry in sorted(pool.iterdir()) if pool.is_dir() else []:
            if not mounted(entry):
                _remove_directory(entry)
        for image in sorted(self.root.glob(f"srv_*{IMAGE}")):
            name = image.name.removesuffix(IMAGE)
            if not mounted(servers / name):
                self.mount(name, servers / name, check=True)
                done.append(f"mounted {name}'s filesystem")
        return done

    def unmount_all(self, servers: Path) -> None:
        """Every server's filesystem unmounted (the agent ends with its games); the next agent
        mounts them again."""
        for image in sorted(self.root.glob(f"srv_*{IMAGE}")):
            with contextlib.suppress(DiskError):
                self.unmount(servers / image.name.removesuffix(IMAGE))
        self.ending.set()
        with contextlib.suppress(DiskError), self.changing:
            self._drain_pool()

    def _run(self, tool: str, *arguments: str, accept: tuple[int, ...] = (0,)) -> None:
        command = [self.tools[tool], *arguments]
        for attempt in range(3):
            result = subprocess.run(  # noqa: S603 (an argument list of the agent's own)
                command,
                env=HELPER_ENV,
                cwd="/",
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=HELPER_SECONDS,
                check=False,
            )
            if result.returncode in accept:
                return
            if tool == "umount" and "busy" in result.stderr and attempt < 2:
                time.sleep(0.2)  # a game's last process lets go of it a moment after its exit
                continue
            break
        why = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no message"]
        raise DiskError(f"{tool} failed ({result.returncode}): {why[0][:300]}")


def mount_tmpfs(tool: str, path: Path, options: str = GAMES_TMPFS) -> None:
    """A small tmpfs on `path` (the games' files), so that a game's mountinfo names it by its
    own root, not by the agent's data directory."""
    if mounted(path):
        return
    path.mkdir(exist_ok=True)
    result = subprocess.run(  # noqa: S603 (an argument list of the agent's own)
        [tool, "-t", "tmpfs", "-o", options, "gshost-games", str(path)],
        env=HELPER_ENV,
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise DiskError(f"cannot mount a tmpfs on {path}: {result.stderr.strip()[:300]}")


def _move_mount(source: Path, target: Path) -> None:
    if _LIBC.mount(os.fsencode(source), os.fsencode(target), None, MS_MOVE, None) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number), str(target))


def _copy_owners(source: Path, copy: Path) -> None:
    """The copy's entries owned as the source's are (a copy made by root is root's)."""
    for root, dirs, files in os.walk(source):
        for name in dirs + files:
            found = os.lstat(os.path.join(root, name))
            relative = os.path.relpath(os.path.join(root, name), source)
            os.lchown(copy / relative, found.st_uid, found.st_gid)


def _remove_directory(path: Path) -> None:
    if mounted(path):
        return  # still someone's filesystem: never emptied from here
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class ImageSwap:
    """A server's new content staged on a filesystem of its own (`archives.Swap`), whose image
    then takes the place of the server's."""

    def __init__(self, disks: Disks, name: str, disk_mb: int) -> None:
        self.disks, self.name, self.disk_mb = disks, name, disk_mb

    def make(self, staging: Path) -> None:
        self.disks.make_staging(staging, self.disk_mb)

    def discard(self, staging: Path) -> None:
        self.disks.discard_staging(staging)

    def swap_in(self, staging: Path, directory: Path) -> None:
        self.disks.replace(staging, self.name, directory)
