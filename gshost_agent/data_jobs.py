"""Jobs on a server's data: backup, restore, wipe, reinstall (docs/agent-protocol.md, "Jobs").

One job at a time per server. The work runs in the node's job threads (`archives` streams,
never holding an archive in memory); the event loop only reports. A job is recorded in the
server's run directory (`job.json`) while it runs: an agent killed mid-way finds it when it
is back, reports the job failed, and `archives.recover_directories` / `remove_partials` have
already put the directories back as they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from gshost_agent import archives, bucket
from gshost_agent.keeper import write_json_atomically
from gshost_agent.layout import GameIdentity, Layout
from gshost_agent.protocol import OBJECT_STORAGE, JobKind, JobRequest, ReportKind, ServerState
from gshost_agent.server_state import DEFAULT_DISK_MB, Busy, Intent, InvalidState, Reporter
from gshost_agent.settings_files import read_settings, settings_for, write_settings
from gshost_agent.templates import GameCatalog, GameTemplate

logger = logging.getLogger("gshost_agent.jobs")

JOB_FILE = "job.json"
SERVER_FILE = "server.json"  # the game of a server that has data here but never ran
INTERRUPTED = "the agent stopped during the job"
PART_URLS_SECONDS = 30.0


class Game(Protocol):
    """The server's game, as a job that stops it meanwhile sees it (the supervisor)."""

    async def stop_for_job(self) -> None:
        """Stops it the normal way, and returns once it has exited."""

    async def start_after_job(self) -> None:
        """Starts it again as it last ran."""


class PartUrlSource(Protocol):
    """The control plane, asked for presigned URLs of a backup's next parts."""

    async def backup_part_urls(self, backup_id: str, first: int, count: int) -> list[str]: ...


class JobThreads:
    """The node's job threads (a bounded pool), and the flag that stops their work when the
    agent ends (a thread cannot be killed; it checks the flag at every chunk)."""

    def __init__(self, count: int, control: PartUrlSource | None = None) -> None:
        self.executor = ThreadPoolExecutor(max_workers=count, thread_name_prefix="gshost-job")
        self.ending = threading.Event()
        self.control = control

    def close(self) -> None:
        self.ending.set()
        self.executor.shutdown(wait=False, cancel_futures=True)


def save_job(run_dir: Path, request: JobRequest, start_again: bool = False) -> None:
    """`start_again`: the job stopped the game, which runs again after it."""
    write_json_atomically(run_dir / JOB_FILE, asdict(request) | {"start_again": start_again})


def forget_job(run_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (run_dir / JOB_FILE).unlink()


def interrupted_job(run_dir: Path) -> str | None:
    """The id of a job an earlier agent left unfinished in `run_dir`, if any."""
    try:
        return str(json.loads((run_dir / JOB_FILE).read_text())["job_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def interrupted_job_stopped_game(run_dir: Path) -> bool:
    """Whether the job an earlier agent left unfinished had stopped the game to start it again."""
    try:
        return json.loads((run_dir / JOB_FILE).read_text()).get("start_again") is True
    except (OSError, ValueError, AttributeError):
        return False


def disk_limit_mb(layout: Layout, server_id: str, given: int | None = None) -> int:
    """The server's disk limit: as given, else that of its plan when it last ran here."""
    if given is not None:
        return given
    intent = Intent.load(layout.run_dir(server_id))
    return intent.request.disk_mb if intent is not None else DEFAULT_DISK_MB


def backup_path(layout: Layout, server_id: str, backup_id: str) -> Path:
    return layout.backups / server_id / f"{backup_id}.tar.gz"


def finished(
    job_id: str,
    *,
    error: str | None = None,
    archived: archives.Archived | None = None,
) -> dict[str, Any]:
    """The details of a `job_finished` report."""
    return {
        "job_id": job_id,
        "succeeded": error is None,
        "error": error,
        "size_bytes": archived.size_bytes if archived else None,
        "sha256": archived.sha256 if archived else None,
    }


@dataclass
class JobWork:
    """What one job does, in a job thread. `progress(percent)` may be called from there."""

    layout: Layout
    server_id: str
    request: JobRequest
    template: GameTemplate
    owner: tuple[int, int] | None  # the server's own uid and gid (None: not root)
    progress: Callable[[int], None]
    ending: threading.Event
    part_urls: bucket.PartUrls | None = None

    @property
    def directory(self) -> Path:
        return self.layout.server_dir(self.server_id)

    def run(self) -> archives.Archived | None:
        if self.request.kind == JobKind.BACKUP:
            return self.backup()
        if self.request.kind == JobKind.RESTORE:
            self.restore()
        elif self.request.kind == JobKind.WIPE:
            self.wipe()
        else:
            self.reinstall()
        return None

    def backup(self) -> archives.Archived:
        size = archives.directory_size(self.directory)
        throttle = archives.Throttle(size, self.progress, self.ending)
        if self.request.storage == OBJECT_STORAGE:
            return self.backup_to_bucket(size, throttle)
        target = backup_path(self.layout, self.server_id, self.request.backup_id)
        target.parent.mkdir(mode=0o700, exist_ok=True)
        return archives.write_backup(self.directory, target, throttle)

    def backup_to_bucket(self, size: int, progress: archives.Progress) -> archives.Archived:
        """The archive streamed to the bucket as it is written; nothing of it on this disk."""
        if self.part_urls is None:
            raise bucket.UploadError("this agent cannot ask for upload URLs")
        sink = bucket.MultipartSink(bucket.part_size_for(size), self.part_urls, self.ending)
        try:
            archived = archives.stream_backup(self.directory, sink.write, progress)
            sink.finish()
        except BaseException:
            sink.abandon()
            raise
        return archived

    def restore(self) -> None:
        if self.request.download_url:
            self.restore_from_bucket()
            return
        archive = backup_path(self.layout, self.server_id, self.request.backup_id)
        size = archive.stat().st_size if archive.exists() else 0
        throttle = archives.Throttle(2 * size, self.progress, self.ending)
        limit = self.disk_limit_mb << 20
        archives.restore_backup(
            archive, self.request.sha256, self.directory, throttle, self.owner, limit, self.swap
        )

    @property
    def disk_limit_mb(self) -> int:
        return disk_limit_mb(self.layout, self.server_id, self.request.disk_mb)

    @property
    def swap(self) -> archives.Swap:
        return self.layout.swap(self.server_id, self.disk_limit_mb)

    def restore_from_bucket(self) -> None:
        limit = self.disk_limit_mb << 20
        expected = archives.Archived(self.request.size_bytes, self.request.sha256)
        throttle = archives.Throttle(expected.size_bytes, self.progress, self.ending)
        download = bucket.Download(self.request.download_url)
        try:
            archives.restore_stream(
                download.answer, expected, self.directory, throttle, self.owner, limit, self.swap
            )
        finally:
            download.close()

    def wipe(self) -> None:
        """The template's wipe paths, removed (never followed: a link goes, not its target).
        The game is stopped meanwhile, so nothing is swapped under the agent's feet."""
        for relative in self.template.wipe_paths:
            path = _inside(self.directory, relative)
            if path is None or not os.path.lexists(path):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()

    def reinstall(self) -> None:
        """A fresh directory, swapped in whole: with the template's settings file only, or
        `empty` (the game's next start writes its settings file)."""
        settings = settings_for(self.template, self.request.settings)
        staging = self.directory.with_name(f".{self.server_id}{archives.STAGING}")
        swap = self.swap
        swap.make(staging)
        try:
            if not self.request.empty:
                gid = self.owner[1] if self.owner else None
                write_settings(staging, self.template, settings, gid)
        except BaseException:
            swap.discard(staging)
            raise
        swap.swap_in(staging, self.directory)


def _inside(directory: Path, relative: str) -> Path | None:
    """`directory / relative` when it stays inside through real directories, else None."""
    parts = Path(relative).parts
    if not parts or Path(relative).is_absolute() or ".." in parts:
        return None
    path = directory
    for part in parts[:-1]:
        path = path / part
        if path.is_symlink() or not path.is_dir():
            return None
    return path / parts[-1]


async def run_in(threads: JobThreads, work: JobWork) -> dict[str, Any]:
    """The job's work in a job thread; the details of its `job_finished` report."""
    loop = asyncio.get_running_loop()
    try:
        archived = await loop.run_in_executor(threads.executor, work.run)
    except archives.Cancelled:
        return finished(work.request.job_id, error=INTERRUPTED)
    except (archives.ArchiveError, bucket.UploadError) as error:
        return finished(work.request.job_id, error=str(error))
    except OSError as error:
        logger.warning("%s: %s job failed: %s", work.server_id, work.request.kind, error)
        return finished(work.request.job_id, error=f"{error.strerror or error}"[:300])
    except Exception as error:
        logger.exception("%s: %s job failed", work.server_id, work.request.kind)
        return finished(work.request.job_id, error=f"the agent failed: {type(error).__name__}")
    return finished(work.request.job_id, archived=archived)


class ServerData:
    """A server's data on this node, beside its process (the supervisor's): the one job on it
    at a time, its settings file, and the game of a server whose data came before its first
    start here. Its checks and changes have no `await` between them: on the agent's event
    loop nothing else comes in between."""

    def __init__(
        self,
        *,
        server_id: str,
        layout: Layout,
        identity: GameIdentity,
        catalog: GameCatalog,
        report: Reporter,
        threads: JobThreads,
    ) -> None:
        self.server_id = server_id
        self.layout = layout
        self.identity = identity
        self.catalog = catalog
        self.report = report
        self.threads = threads
        self.run_dir = layout.run_dir(server_id)
        self.job: JobRequest | None = None
        self._task: asyncio.Task[None] | None = None

    def refuse_while_job(self, state: ServerState) -> None:
        """A restore, wipe or reinstall replaces files the game would use: no start meanwhile."""
        if self.job is not None and self.job.needs_stopped:
            raise Busy(state, self.job.kind)

    def start_job(self, request: JobRequest, state: ServerState, game: Game | None = None) -> None:
        """Starts the job; its `job_finished` report tells how it ended. A restore of a running
        game stops `game` first and starts it again after, whether the restore worked or not
        (a failed one left the directory as it was)."""
        if self.job is not None:
            raise Busy(state, self.job.kind)
        pausing = game if request.stops_game(state) else None
        if request.needs_stopped and state != ServerState.STOPPED and pausing is None:
            raise InvalidState(state)
        template = self.catalog.get(request.game)
        if request.kind == JobKind.REINSTALL:
            settings_for(template, request.settings)  # refused before anything is touched
        gid = self._adopt(template)
        save_job(self.run_dir, request, start_again=pausing is not None)
        self.job = request
        owner = None if gid is None else (gid, gid)  # the server's own uid and gid
        loop = asyncio.get_running_loop()

        def progress(percent: int) -> None:  # from the job's thread
            details = {"job_id": request.job_id, "progress": percent}
            loop.call_soon_threadsafe(self.report, self.server_id, ReportKind.JOB_PROGRESS, details)

        work = JobWork(
            self.layout, self.server_id, request, template, owner, progress, self.threads.ending,
            self._part_urls(request, loop),
        )  # fmt: skip
        self.report(self.server_id, ReportKind.JOB_PROGRESS, {"job_id": request.job_id,
                                                             "progress": 0})  # fmt: skip
        self._task = loop.create_task(self._run(work, pausing))

    def _part_urls(
        self, request: JobRequest, loop: asyncio.AbstractEventLoop
    ) -> bucket.PartUrls | None:
        """For a backup to the bucket: asks the control plane for URLs, from the job's thread."""
        control = self.threads.control
        if request.storage != OBJECT_STORAGE or control is None:
            return None

        def part_urls(first: int, count: int) -> list[str]:
            asking = control.backup_part_urls(request.backup_id, first, count)
            return asyncio.run_coroutine_threadsafe(asking, loop).result(PART_URLS_SECONDS)

        return part_urls

    async def _run(self, work: JobWork, pausing: Game | None) -> None:
        try:
            if pausing is not None:
                await pausing.stop_for_job()
        except Exception:
            logger.exception("%s: the game could not be stopped for the job", self.server_id)
            details = finished(work.request.job_id, error="the game could not be stopped")
        else:
            details = await run_in(self.threads, work)
        self.report(self.server_id, ReportKind.JOB_FINISHED, details)
        if pausing is not None and self.threads.ending.is_set():
            return  # the agent ends: the next one finds the job (its end reported again, and
            # ignored) and starts the game again
        forget_job(self.run_dir)  # after the report is in the outbox: never lost, maybe twice
        self.job = None
        if pausing is not None:
            await pausing.start_after_job()

    def put_settings(self, game: str, given: dict[str, Any], state: ServerState) -> dict[str, str]:
        """Writes the settings file now: a stopped server is in sync at once, a running one
        reads it at its next start."""
        self.refuse_while_job(state)
        template = self.catalog.get(game)
        values = settings_for(template, given)
        gid = self._adopt(template)
        write_settings(self.layout.server_dir(self.server_id), template, values, gid)
        return read_settings(self.layout.server_dir(self.server_id), template)

    def _adopt(self, template: GameTemplate) -> int | None:
        """The server's directories made and its game noted; the server's gid."""
        gid = self.layout.prepare_server(self.server_id, disk_limit_mb(self.layout, self.server_id))
        self.layout.prepare_run_dir(self.server_id)
        write_json_atomically(self.run_dir / SERVER_FILE, {"game": template.name})
        return gid

    def noted_template(self) -> GameTemplate | None:
        with contextlib.suppress(OSError, LookupError, TypeError, ValueError):
            game = json.loads((self.run_dir / SERVER_FILE).read_text())["game"]
            return self.catalog.get(str(game))
        return None
