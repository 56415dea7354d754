"""Where the agent keeps things under AGENT_DATA_DIR, who owns them, and who games run as.

    <data>/            0711 root: games may pass through, not list
    <data>/servers/    0711 root; <id>/ root:<the server's own gid> 0770, the game's cwd
    <data>/games/      0755 root; <game>/ the template's files, world-readable
    <data>/run/        0700 root; <id>/ the keeper's spec, socket, console log, exit record
    <data>/outbox/     0700 root: reports not yet acknowledged
    <data>/samples/    0700 root: 24 h of readings per server
    <data>/backups/    0700 root; <id>/<backup id>.tar.gz, archives games cannot read
    <data>/disks/      0700 root; <id>.img, each sandboxed server's filesystem (disks.py),
                       mounted on its directory; the games' directory is then a tmpfs

Each server's game runs as a uid of its own, with the gid of the same number as its one group
(gshost_agent.identities: claimed per machine, kept while the server's directory exists,
released when the server leaves the node); the server's directory is that group's: its game
can enter it and no other server's, and no other game shares its uid, so neither can signal
or trace it, nor share its keyrings, inotify instances or process counts. A directory an
earlier agent left (a group of 270000.., every file the one game user's) is handed to the
server's own id at its next start. (AGENT_GAME_USER is still made when missing; no game
runs as it.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gshost_agent import archives, readings
from gshost_agent.disks import Disks, ImageSwap, mount_tmpfs, mounted, used_mb
from gshost_agent.identities import ServerIds
from gshost_agent.keeper import RESERVE
from gshost_agent.server_state import DEFAULT_DISK_MB, DiskLimitExceeded
from gshost_agent.templates import GAMES_DIR, GameTemplate

RESERVE_BYTES = 16 << 20  # room for a few thousand reports and exit records
SYSTEM_PYTHON = Path("/usr/bin/python3")


class LayoutError(RuntimeError):
    """The data directory or the game user cannot be set up."""


class UnsafeDirectory(LayoutError):
    """A directory of the agent's that someone else could change: another user owns it, or
    others may write it. The agent does not start (exit 2): whoever controls it could swap a
    keeper's spec and have a command run as the agent's user."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}; the agent uses only directories of its own")
        self.path = path


def check_owned(path: Path) -> None:
    """`path`, a directory of the agent's: its own, not a link, writable by it alone."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(found.st_mode) or not stat.S_ISDIR(found.st_mode):
        raise UnsafeDirectory(path, "not a directory (a link?)")
    if found.st_uid != os.geteuid():
        raise UnsafeDirectory(path, f"owned by uid {found.st_uid}, not the agent's")
    if found.st_mode & 0o022:
        raise UnsafeDirectory(path, "writable by others")


@dataclass(frozen=True)
class GameIdentity:
    """Whether games run as users of their own. `uid` None: they run as the agent's own user
    (an agent that is not root); else AGENT_GAME_USER's uid, and each server's game runs as
    that server's own ids (Layout.prepare_server)."""

    uid: int | None

    @property
    def privileged(self) -> bool:
        return self.uid is not None


def game_identity(user: str) -> GameIdentity:
    if os.geteuid() != 0:
        return GameIdentity(uid=None)
    try:
        return GameIdentity(uid=pwd.getpwnam(user).pw_uid)
    except KeyError:
        pass
    command = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user]
    result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0 and result.returncode != 9:  # 9: made meanwhile by someone else
        raise LayoutError(f"cannot create the game user {user}: {result.stderr.strip()}")
    return GameIdentity(uid=pwd.getpwnam(user).pw_uid)


def game_python() -> str:
    """An interpreter the game user can run: the agent's own may live under a private home."""
    if os.access(SYSTEM_PYTHON, os.X_OK):
        return str(SYSTEM_PYTHON)
    return sys.executable


class Layout:
    def __init__(self, root: Path, identity: GameIdentity, ids: ServerIds | None = None) -> None:
        self.root = root
        self.identity = identity
        self.ids = ids or ServerIds()
        self.servers = root / "servers"
        self.games = root / "games"
        self.run = root / "run"
        self.outbox = root / "outbox"
        self.samples = root / "samples"
        self.backups = root / "backups"
        self.transfers = root / "transfers"
        self.disks: Disks | None = None  # sandboxed: a filesystem per server (use_disks)

    def prepare(self) -> None:
        for path, mode in (
            (self.root, 0o711),
            (self.servers, 0o711),
            (self.games, 0o755),
            (self.run, 0o700),
            (self.outbox, 0o700),
            (self.samples, 0o700),
            (self.backups, 0o700),
        ):
            check_owned(path)
            path.mkdir(parents=True, exist_ok=True)
            check_owned(path)  # made meanwhile by someone else
            os.chmod(path, mode)
        for entry in self.run.iterdir():
            if entry.is_symlink() or entry.is_dir():
                check_owned(entry)

    def keep_reserve(self) -> bool:
        """`<data>/reserve`, real blocks the agent gives up when a game has filled the disk so
        that its reports and exit records are still written (see keeper.write_json_atomically);
        made again once there is room. False when there is no room for it now."""
        reserve = self.root / RESERVE
        if reserve.exists():
            return True
        if shutil.disk_usage(self.root).free < 4 * RESERVE_BYTES:
            return False
        temporary = self.root / f".{RESERVE}.tmp"
        try:
            with open(temporary, "wb") as file:
                block = bytes(1 << 20)
                for _ in range(RESERVE_BYTES >> 20):
                    file.write(block)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, reserve)
        except OSError:
            with contextlib.suppress(OSError):
                temporary.unlink()
            return False
        return True

    def lock(self) -> int:
        """Held while the agent runs (the descriptor it returns): two agents on one data
        directory would each judge the other's games. Keepers do not inherit it."""
        descriptor = os.open(self.root / "agent.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            os.close(descriptor)
            raise LayoutError(f"another agent is using {self.root}") from error
        return descriptor

    def server_dir(self, server_id: str) -> Path:
        return self.servers / server_id

    def run_dir(self, server_id: str) -> Path:
        return self.run / server_id

    def use_disks(self, tools: dict[str, str]) -> list[str]:
        """Each server's directory on a filesystem of its own from now on, the games' files on
        a tmpfs; what an earlier agent left is mounted again. What it did, for the log."""
        disks = Disks(self.root / "disks", tools)
        check_owned(disks.root)
        disks.prepare()
        mount_tmpfs(tools["mount"], self.games)
        self.disks = disks
        stagings = [e for e in self.servers.iterdir() if e.name.endswith(archives.STAGING)]
        if self.transfers.is_dir():
            stagings += [entry for entry in self.transfers.iterdir() if entry.is_dir()]
        return disks.recover(self.servers, stagings)

    def refill_disks(self, count: int) -> int:
        """Blank filesystems of the default plan made ahead, `count` at most: a server's first
        start takes one instead of making its own. How many were made."""
        return self.disks.refill(count, DEFAULT_DISK_MB) if self.disks is not None else 0

    def disks_rest_in(self) -> float:
        """Seconds until blank filesystems may be made (`refill_disks`); 0: now."""
        return self.disks.rest_in() if self.disks is not None else 0.0

    def release_disks(self) -> None:
        """Every server's filesystem and the games' tmpfs unmounted (the agent ends with its
        games)."""
        if self.disks is not None:
            self.disks.unmount_all(self.servers)
            self.disks.unmount(self.games)

    def prepare_server(self, server_id: str, disk_mb: int = DEFAULT_DISK_MB) -> int | None:
        """The server's directory, made when missing (on a filesystem of `disk_mb` when the
        node has them; one it has keeps its size until `fit_disk`); the server's own id, its
        game's uid and gid (None: not privileged). A directory an earlier agent gave a group of
        the old range (all games then ran as one uid) is handed to the server's own id at once."""
        directory = self.server_dir(server_id)
        directory.mkdir(exist_ok=True)
        if self.disks is not None:
            self.disks.ensure(server_id, directory, disk_mb)
        if not self.identity.privileged:
            os.chmod(directory, 0o700)
            return None
        found = directory.stat()
        server_id_number = self.ids.claim(directory, prefer=found.st_gid)
        if found.st_gid != server_id_number:
            hand_over(directory, server_id_number)
        os.chown(directory, 0, server_id_number)
        os.chmod(directory, 0o770)  # noqa: S103 (root and the server's own group only)
        return server_id_number

    def release_server(self, server_id: str) -> None:
        """The server's id free again, once its directory is gone."""
        if self.identity.privileged and not self.server_dir(server_id).exists():
            self.ids.release(self.server_dir(server_id))

    def disk_used_mb(self, server_id: str) -> float:
        """What the server's directory holds: its filesystem's count, else a walk of it."""
        directory = self.server_dir(server_id)
        if self.disks is not None and self.disks.has(server_id) and mounted(directory):
            return used_mb(directory)
        return readings.disk_mb(directory)

    def fit_disk(self, server_id: str, disk_mb: int) -> int | None:
        """Before a start: the server's directory prepared (`prepare_server`: its own id is
        what this returns) and its filesystem sized for `disk_mb`; DiskLimitExceeded when what
        it holds is more."""
        server_id_number = self.prepare_server(server_id, disk_mb)
        if self.disks is not None:
            self.disks.fit(server_id, self.server_dir(server_id), disk_mb)
            return server_id_number
        used = readings.disk_mb(self.server_dir(server_id))
        if used > disk_mb:
            raise DiskLimitExceeded(used, disk_mb)
        return server_id_number

    def swap(self, server_id: str, disk_mb: int) -> archives.Swap:
        """How new content for the server (a restore, a move) is staged and swapped in."""
        if self.disks is not None:
            return ImageSwap(self.disks, server_id, disk_mb)
        return archives.RENAMES

    def remove_server(self, server_id: str) -> None:
        """The server's directory gone, and its filesystem with it."""
        directory = self.server_dir(server_id)
        if self.disks is not None:
            self.disks.remove(server_id, directory)
        if directory.is_dir() and not directory.is_symlink():
            shutil.rmtree(directory, ignore_errors=True)

    def remove_backups(self, server_id: str) -> None:
        """The server's backup archives on this node gone (the server is deleted)."""
        directory = self.backups / server_id
        if directory.is_dir() and not directory.is_symlink():
            shutil.rmtree(directory, ignore_errors=True)

    def prepare_run_dir(self, server_id: str) -> Path:
        run_dir = self.run_dir(server_id)
        run_dir.mkdir(exist_ok=True)
        check_owned(run_dir)
        os.chmod(run_dir, 0o700)
        return run_dir

    def install_game_files(self, template: GameTemplate) -> Path:
        """The template's files, copied where the game user can read them: `{game_files}`."""
        target = self.games / template.name
        target.mkdir(exist_ok=True)
        os.chmod(target, 0o755)  # noqa: S103 (the game user must read it)
        for name in template.files:
            source = _template_file(template, name)
            temporary = target / f".{Path(name).name}.tmp"
            shutil.copyfile(source, temporary)
            os.chmod(temporary, 0o644)
            os.replace(temporary, target / Path(name).name)
        return target


def hand_over(directory: Path, number: int) -> None:
    """Everything in `directory` (not following links) owned by uid and gid `number`: what a
    game wrote as an earlier id stays its own."""
    for root, names, files in os.walk(directory):
        for name in (*names, *files):
            path = os.path.join(root, name)
            with contextlib.suppress(FileNotFoundError):
                owner = os.lstat(path).st_uid
                os.lchown(path, owner if owner == 0 else number, number)  # root's stay root's


def _template_file(template: GameTemplate, name: str) -> Path:
    # A template's files lie beside it, or ship in the agent's package (demo_game.py).
    for directory in (template.directory, GAMES_DIR.parent):
        candidate = directory / name
        if candidate.is_file():
            return candidate
    raise LayoutError(f"the template file {name} is missing from the agent's package")
