"""The node: every server's supervisor, the outbox and its delivery, the heartbeat, the readings'
sampling. Made once by `gshost-agent`, which owns its lifecycle (start, then close)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gshost_agent import __version__, disks
from gshost_agent.archives import recover_directories, remove_partials
from gshost_agent.capacity import machine_capacity
from gshost_agent.config import Config
from gshost_agent.console_socket import ConsoleAccess, Consoles
from gshost_agent.control import ControlClient
from gshost_agent.data_jobs import (
    INTERRUPTED,
    JobThreads,
    backup_path,
    finished,
    forget_job,
    interrupted_job,
    interrupted_job_stopped_game,
)
from gshost_agent.files.spaces import FileSpaces
from gshost_agent.keepers import Zygote
from gshost_agent.launcher import Launcher
from gshost_agent.layout import Layout, game_identity
from gshost_agent.netns import Networks, Registry
from gshost_agent.outbox import Outbox, deliver_forever, flush
from gshost_agent.protocol import (
    HEARTBEAT_PLAYERS_LIMIT,
    SERVER_ID,
    Capacity,
    Heartbeat,
    HeartbeatAnswer,
    Reading,
    Report,
    ReportKind,
    ServerState,
    SftpEndpoint,
    moment_of,
)
from gshost_agent.readings import SAMPLE_SECONDS, PendingMinutes, UnsentMinutes
from gshost_agent.sandbox import Sandboxing, detect, with_seccomp
from gshost_agent.seccomp import FILTER_FILE as SECCOMP_FILTER_FILE
from gshost_agent.server_state import InvalidState, MemoryRoot
from gshost_agent.sftp.service import SftpService
from gshost_agent.supervisor import Supervisor
from gshost_agent.templates import GameCatalog
from gshost_agent.transfers import Transfers
from gshost_agent.withdrawals import Withdrawal, WithdrawalInvalid, Withdrawals

logger = logging.getLogger("gshost_agent.node")

HEARTBEAT_SECONDS = 10
# A heartbeat sent early (a game became ready) goes at most this often: a burst of starts
# sends one a second, not one per game.
EARLY_HEARTBEAT_GAP_SECONDS = 1.0
WITHDRAWALS_TAKEN_KEPT = 1000  # the control plane keeps a withdrawal for a node 10 minutes
JOB_THREADS = 2  # backups and restores at once; more wait their turn (disk-bound anyway)
CGROUP_V1 = Path("/sys/fs/cgroup/memory")
CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_DIR = "gshost"


def detect_memory_root() -> MemoryRoot | None:
    """The cgroups the agent may make games' groups under (memory, and pids and cpu where the
    node has them), or None (RLIMIT_AS then)."""
    with contextlib.suppress(OSError):
        if (CGROUP_V1 / "memory.limit_in_bytes").exists() and os.access(CGROUP_V1, os.W_OK):
            (CGROUP_V1 / CGROUP_DIR).mkdir(exist_ok=True)
            others: dict[str, Path | None] = {}
            for name, marker in (("pids", "pids.max"), ("cpu", "cpu.cfs_quota_us")):
                others[name] = None
                with contextlib.suppress(OSError):
                    root = CGROUP_V1.parent / name
                    (root / CGROUP_DIR).mkdir(exist_ok=True)
                    if (root / CGROUP_DIR / marker).exists():
                        others[name] = root / CGROUP_DIR
            return MemoryRoot(CGROUP_V1 / CGROUP_DIR, 1, others["pids"], others["cpu"])
        controllers = (CGROUP_V2 / "cgroup.controllers").read_text().split()
        if "memory" in controllers and os.access(CGROUP_V2, os.W_OK):
            names = [name for name in ("memory", "pids", "cpu") if name in controllers]
            wanted = " ".join(f"+{name}" for name in names)
            (CGROUP_V2 / CGROUP_DIR).mkdir(exist_ok=True)
            (CGROUP_V2 / "cgroup.subtree_control").write_text(wanted)
            (CGROUP_V2 / CGROUP_DIR / "cgroup.subtree_control").write_text(wanted)
            return MemoryRoot(CGROUP_V2 / CGROUP_DIR, 2)
    return None


def _networks(sandboxing: Sandboxing, pool_size: int) -> Networks | None:
    if not sandboxing.sandboxed:
        return None
    return Networks(
        sandboxing.tool("ip"),
        sandboxing.tool("iptables"),
        sandboxing.tool("iptables-restore"),
        Registry(),
        pool_size,
        ip6tables=sandboxing.tool("ip6tables"),
        ip6tables_restore=sandboxing.tool("ip6tables-restore"),
    )


class Node:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.identity = game_identity(config.game_user)
        self.layout = Layout(config.data_dir, self.identity)
        self.layout.prepare()
        self._lock = self.layout.lock()
        self.layout.keep_reserve()
        self.memory_root = detect_memory_root() if self.identity.privileged else None
        found = detect(
            privileged=self.identity.privileged,
            has_cgroups=self.memory_root is not None,
            allow_unsandboxed=config.allow_unsandboxed,
            off=config.sandbox_off,
        )
        self.sandboxing = with_seccomp(found, self.layout.run / SECCOMP_FILTER_FILE)
        if self.sandboxing.sandboxed:
            tools = {name: self.sandboxing.tool(name) for name in disks.TOOLS}
            for done in self.layout.use_disks(tools):
                logger.info("disks: %s", done)
        self.networks = _networks(self.sandboxing, config.network_pool)
        self.zygote = Zygote(self.layout.run / "zygote")
        self.launcher = Launcher(
            layout=self.layout,
            memory_root=self.memory_root,
            sandboxing=self.sandboxing,
            networks=self.networks,
            zygote=self.zygote,
        )
        self.outbox = Outbox(self.layout.outbox)
        self.control = ControlClient(config)
        self.catalog = GameCatalog(config.games_dir)
        self.supervisors: dict[str, Supervisor] = {}
        self.jobs = JobThreads(JOB_THREADS, control=self.control)
        self.transfers = Transfers(self.layout, self.catalog)
        # Withdrawn access: one record per process, which console sockets, SFTP sessions and
        # file links subscribe to; the ids the control plane gave them, to say they were taken.
        self.withdrawals = Withdrawals()
        self.files = FileSpaces(
            self.layout, self.catalog, config.pull_allowed_networks, withdrawals=self.withdrawals
        )
        self.unsent_minutes = UnsentMinutes()
        self._withdrawals_taken: dict[int, None] = {}
        self.console_access = ConsoleAccess(self.withdrawals)
        self.consoles = Consoles(self.console_access, self.supervisor, self.control.console_command)
        self.sftp = SftpService(
            host=config.bind_host,
            port=config.sftp_port,
            key_directory=self.layout.root / "sftp",
            files=self.files,
            withdrawals=self.withdrawals,
            ask=self.control.sftp_auth,
            report=self.report,
        )
        self._tasks: list[asyncio.Task[None]] = []
        # Set when a game becomes ready: the next heartbeat goes at once, so the control plane
        # shows its readings within moments, not at the next period.
        self._beat_soon = asyncio.Event()

    def report(
        self,
        server_id: str,
        kind: ReportKind,
        details: dict[str, Any],
        *,
        exit_key: str | None = None,
    ) -> None:
        """`details` are the report's members (`gshost_agent.protocol.Report`) but its server,
        kind and time (now, unless they say when)."""
        if exit_key and self.outbox.exit_reported(server_id, exit_key):
            logger.info("%s: %s already reported", server_id, kind)
            return
        report = Report(server_id=server_id, kind=kind, **({"at": moment_of()} | details))
        seq = self.outbox.add(report, exit_key=exit_key)
        logger.info("%s: %s (report %s)", server_id, kind, seq)
        if kind == ReportKind.READY:
            self._beat_soon.set()

    def withdraw(self, message: dict[str, Any]) -> None:
        """A withdrawal of access the control plane sent (pushed, or in a heartbeat's answer),
        taken once per id (WithdrawalInvalid for one that is not well formed)."""
        number = message.get("id")
        if isinstance(number, int) and number in self._withdrawals_taken:
            return
        self.withdrawals.add(Withdrawal.from_json(message))
        if isinstance(number, int) and not isinstance(number, bool):
            self._withdrawals_taken[number] = None
            while len(self._withdrawals_taken) > WITHDRAWALS_TAKEN_KEPT:
                del self._withdrawals_taken[next(iter(self._withdrawals_taken))]

    def _take_answer(self, answer: HeartbeatAnswer | None) -> None:
        """What a heartbeat's answer carries: the console's keys and origins, withdrawals."""
        if answer is None:  # not a heartbeat's answer
            return
        self.console_access.update(answer)
        for message in answer.withdrawals or ():
            try:
                self.withdraw(message)
            except WithdrawalInvalid as error:
                logger.warning("a withdrawal that is not one was ignored: %s", error)

    def supervisor(self, server_id: str) -> Supervisor:
        """The server's supervisor, made (stopped) on first use."""
        if server_id not in self.supervisors:
            self.supervisors[server_id] = Supervisor(
                server_id=server_id,
                layout=self.layout,
                identity=self.identity,
                report=self.report,
                catalog=self.catalog,
                jobs=self.jobs,
                launcher=self.launcher,
            )
        return self.supervisors[server_id]

    def known(self, server_id: str) -> Supervisor | None:
        """The supervisor of a server this node has run (it has a run directory), else None."""
        if server_id in self.supervisors or self.layout.run_dir(server_id).is_dir():
            return self.supervisor(server_id)
        return None

    def forget(self, server_id: str, *, backups: bool = False) -> None:
        """A stopped server whose data moved to another node, or that is deleted (`backups`:
        its backups on this node go too): no trace of it stays here. Refused while its game
        runs, it is being sent, or a job works on its data."""
        supervisor = self.known(server_id)
        if supervisor is not None and (
            supervisor.running or supervisor.transferring or supervisor.data.job is not None
        ):
            raise InvalidState(supervisor.state)
        self.supervisors.pop(server_id, None)
        self.transfers.remove_copy(server_id)
        if backups:
            self.layout.remove_backups(server_id)
        self.layout.release_server(server_id)

    def remove_backup(self, server_id: str, backup_id: str) -> bool:
        """One backup's archive on this node gone (the control plane deleted the backup);
        False when there was none. Refused while a job works on the server's data: a restore
        may be reading it."""
        supervisor = self.known(server_id)
        if supervisor is not None and supervisor.data.job is not None:
            raise InvalidState(supervisor.state)
        try:
            backup_path(self.layout, server_id, backup_id).unlink()
        except FileNotFoundError:
            return False
        return True

    def states(self) -> dict[str, ServerState]:
        return {server_id: sup.state for server_id, sup in sorted(self.supervisors.items())}

    def games(self) -> list[str]:
        return list(self.catalog.names())

    async def _readings_now(
        self, *, ask_players: bool = True
    ) -> tuple[dict[str, Reading], PendingMinutes]:
        """Each running game asked for its players first (as `GET …/players` does; not for a
        heartbeat sent early, which would put a question in every console), then the readings,
        read off the event loop (a server's disk use walks its directory), each with its
        completed minutes not acknowledged yet. Those are read on the event loop, which takes
        the samples: none is added while they are read, and every sample of a completed minute
        is in."""
        running = [sup for sup in self.supervisors.values() if sup.state == ServerState.RUNNING]
        if running and ask_players:
            await asyncio.gather(*(sup.players() for sup in running), return_exceptions=True)
        readings = await asyncio.to_thread(self.readings)
        stores = {
            server_id: sup.readings.samples for server_id, sup in sorted(self.supervisors.items())
        }
        pending = self.unsent_minutes.pending(stores, time.time())
        for server_id, minutes in pending.minutes.items():
            found = readings.get(server_id, Reading())
            readings[server_id] = replace(found, minutes=tuple(minutes))
        return readings, pending

    def readings(self) -> dict[str, Reading]:
        """For the heartbeat: each server's settings file as it is on disk, and the latest
        stats and players of every server that is not stopped (the control plane shows
        these, and never calls the node to show them)."""
        found: dict[str, Reading] = {}
        for server_id, supervisor in sorted(self.supervisors.items()):
            settings = None
            try:
                settings = supervisor.settings()
            except Exception:  # no template (yet): the file cannot be read as settings
                logger.debug("%s: no settings to report", server_id)
            if supervisor.state == ServerState.STOPPED:
                found[server_id] = Reading(settings=settings)
                continue
            players = supervisor.readings.roster.listing()[:HEARTBEAT_PLAYERS_LIMIT]
            found[server_id] = Reading(
                settings=settings,
                stats=supervisor.stats(),
                players=tuple(players),
                max_players=supervisor.max_players(),
            )
        return found

    async def start(self) -> None:
        """Reattaches to the keepers an earlier agent left, then starts the background work."""
        if self.sandboxing.sandboxed:
            logger.info("isolation: %s", self.sandboxing.describe())
        else:
            logger.warning(
                "isolation: %s%s",
                self.sandboxing.describe(),
                "" if self.sandboxing.allow_unsandboxed else "; games will not be started",
            )
        if self.networks is not None:
            await self.networks.prepare()
            for slot in await self.networks.sweep():
                logger.info("swept the network of a game that is gone (slot %s)", slot)
            self.networks.refill()
        stopped_by_jobs = self._recover_jobs()
        for name in self.transfers.prepare():
            logger.warning("after an interrupted transfer: removed %s", name)
        for entry in sorted(self.layout.run.iterdir()):
            if entry.is_dir() and SERVER_ID.fullmatch(entry.name):
                try:
                    await self.supervisor(entry.name).resume()
                except Exception:
                    logger.exception("%s: cannot reattach", entry.name)
        for server_id in stopped_by_jobs:  # a restore stopped the game: it runs again, as before
            try:
                await self.supervisor(server_id).start_after_job()
            except Exception:
                logger.exception("%s: cannot start the game again", server_id)
        await self.sftp.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(deliver_forever(self.outbox, self.control)),
            loop.create_task(self._heartbeat_forever()),
            loop.create_task(self._sample_forever()),
            loop.create_task(self._refill_disks()),
        ]

    def _recover_jobs(self) -> list[str]:
        """What jobs an earlier agent left half-done: no partial archive or staging directory
        stays, a server directory half swapped is put back, and each job is reported failed.
        The servers whose game such a job had stopped (to be started again)."""
        for done in recover_directories(self.layout.servers):
            logger.warning("after an interrupted job: %s", done)
        for partial in remove_partials(self.layout.backups):
            logger.warning("after an interrupted backup: removed %s", partial.name)
        stopped_games = []
        for entry in sorted(self.layout.run.iterdir()):
            job_id = interrupted_job(entry) if entry.is_dir() else None
            if job_id is not None and SERVER_ID.fullmatch(entry.name):
                details = finished(job_id, error=INTERRUPTED)
                self.report(entry.name, ReportKind.JOB_FINISHED, details)
                if interrupted_job_stopped_game(entry):
                    stopped_games.append(entry.name)
                forget_job(entry)
        return stopped_games

    async def _heartbeat_forever(self) -> None:
        early = False
        while True:
            readings, minutes = await self._readings_now(ask_players=not early)
            heartbeat = Heartbeat(
                agent_version=__version__,
                outbox_id=self.outbox.outbox_id,
                isolation=self.sandboxing.describe(),
                servers=self.states(),
                games=tuple(self.games()),  # the templates: the control plane's game registry
                game_capabilities={
                    game: tuple(listed) for game, listed in self.catalog.capabilities().items()
                },
                capacity=Capacity(**machine_capacity(self.config.data_dir)),
                readings={server_id: found.to_json() for server_id, found in readings.items()},
                sftp=SftpEndpoint(
                    port=self.sftp.listening_port, fingerprint=self.sftp.fingerprint or ""
                ),
                withdrawals_taken=tuple(self._withdrawals_taken),
            )
            try:
                status, answer = await self.control.heartbeat(heartbeat)
                if status == 200:
                    self.unsent_minutes.acknowledge(minutes)
                    self._take_answer(answer)
                else:
                    logger.warning("heartbeat answered %s", status)
            except Exception as error:  # no answer: the next one will tell
                logger.warning("heartbeat not delivered (%s)", type(error).__name__)
            sent_at = time.monotonic()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._beat_soon.wait(), HEARTBEAT_SECONDS)
            early = self._beat_soon.is_set()
            if early:
                await asyncio.sleep(sent_at + EARLY_HEARTBEAT_GAP_SECONDS - time.monotonic())
            self._beat_soon.clear()

    async def _sample_forever(self) -> None:
        while True:
            await asyncio.sleep(SAMPLE_SECONDS)
            for supervisor in list(self.supervisors.values()):
                try:
                    supervisor.sample()
                    await supervisor.watch_disk()
                except Exception:
                    logger.exception("%s: sampling failed", supervisor.server_id)
            self.layout.keep_reserve()  # again, once a game that filled the disk is gone

    async def _refill_disks(self) -> None:
        """The blank filesystems made ahead (as many as the networks), topped up every 10 s,
        or as soon as the node comes to rest within that."""
        while True:
            try:
                count = self.config.network_pool
                if made := await asyncio.to_thread(self.layout.refill_disks, count):
                    logger.info("made %s blank filesystems ahead", made)
            except Exception:
                logger.exception("cannot make blank filesystems ahead")
            await asyncio.sleep(min(self.layout.disks_rest_in() or SAMPLE_SECONDS, SAMPLE_SECONDS))

    async def stop_servers(self, *, grace: float, kill_wait: float) -> None:
        """Every game stopped as its template says; killed once `grace` is over."""
        running = [sup for sup in self.supervisors.values() if sup.running]
        for supervisor in running:
            with contextlib.suppress(Exception):
                await supervisor.stop_for_node()
        ended = [asyncio.ensure_future(sup.ended.wait()) for sup in running]
        if ended:
            _, late = await asyncio.wait(ended, timeout=grace)
            if late:
                for supervisor in running:
                    if supervisor.running:
                        with contextlib.suppress(Exception):
                            await supervisor.kill()
                await asyncio.wait(late, timeout=kill_wait)
        await self.zygote.close()  # no game left to keep: nothing of the node's stays
        await asyncio.to_thread(self.layout.release_disks)  # mounted again by the next agent

    async def close(self, *, flush_seconds: float = 0.0) -> None:
        await self.sftp.close()
        for task in self._tasks:
            task.cancel()
        self.jobs.close()
        if self.networks is not None:
            await self.networks.drain()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if flush_seconds:
            await flush(self.outbox, self.control, flush_seconds)
        await self.control.close()
