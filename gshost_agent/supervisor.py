"""One object per game server owning its state, its keeper, its console and its readings (in
the manner of Wings' server/power.go and crash.go).

What the agent wanted when a game ends decides what the exit was: the intent (`intent.json` in
the server's run directory) says whether a stop was asked for and whether the game was ready,
and outlives the agent, so an agent that comes back judges an exit as the one that left would
have.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gshost_agent.archives import Archived
from gshost_agent.data_jobs import JobRequest, JobThreads, ServerData
from gshost_agent.exits import exit_details, exit_key, exit_kind
from gshost_agent.keepers import KeeperGone, KeeperHandle, Zygote
from gshost_agent.layout import GameIdentity, Layout, game_python
from gshost_agent.netns import Networks, Slot
from gshost_agent.players import PlayerRoster
from gshost_agent.protocol import (
    LAST_OUTPUT_LINES,
    ReportKind,
    ServerState,
    format_time,
    last_output,
    parse_time,
)
from gshost_agent.readings import ProcessTree, Sample, SampleStore
from gshost_agent.sandbox import (
    GAME_FILES_INSIDE,
    SANDBOX_PROCESSES,
    GameBox,
    Sandboxing,
    sandboxed_command,
    seccomp_argument,
)
from gshost_agent.server_state import (
    Busy,
    Intent,
    InvalidState,
    MemoryRoot,
    Reporter,
    StartRequest,
    StopReason,
    console_command_checked,
)
from gshost_agent.settings_files import read_settings, settings_for, write_settings
from gshost_agent.templates import GameCatalog, GameTemplate
from gshost_agent.transfers import Transfers

logger = logging.getLogger("gshost_agent.supervisor")

HELD_LINES = 1000
PLAYERS_ANSWER_SECONDS = 2.0
# A game's answer this recent is not asked again: every question is a line in its console.
PLAYERS_FRESH_SECONDS = 5.0

# How a start gets its keeper (run directory, spec, zygote): `KeeperHandle.spawn`; and how a
# new agent reaches the keeper an earlier one left (run directory): `KeeperHandle`. The unit
# tests pass fakes.
KeeperSpawner = Callable[[Path, dict[str, Any], Zygote | None], Awaitable[KeeperHandle]]
KeeperAttacher = Callable[[Path], KeeperHandle]


class Supervisor:
    def __init__(
        self,
        *,
        server_id: str,
        layout: Layout,
        identity: GameIdentity,
        memory_root: MemoryRoot | None,
        report: Reporter,
        catalog: GameCatalog,
        jobs: JobThreads,
        sandboxing: Sandboxing | None = None,
        networks: Networks | None = None,
        zygote: Zygote | None = None,
        spawn_keeper: KeeperSpawner = KeeperHandle.spawn,
        attach_keeper: KeeperAttacher = KeeperHandle,
    ) -> None:
        self.server_id = server_id
        self.data = ServerData(
            server_id=server_id,
            layout=layout,
            identity=identity,
            catalog=catalog,
            report=report,
            threads=jobs,
        )
        self.catalog = catalog
        self.layout = layout
        self.identity = identity
        self.memory_root = memory_root
        self.sandboxing = sandboxing or Sandboxing(False, "not asked for", allow_unsandboxed=True)
        self.networks = networks
        self.zygote = zygote
        self.spawn_keeper = spawn_keeper
        self.attach_keeper = attach_keeper
        self.report = report
        self.run_dir = layout.run_dir(server_id)
        self.state = ServerState.STOPPED
        self.intent: Intent | None = None
        self.template: GameTemplate | None = None
        self.keeper: KeeperHandle | None = None
        self.pid: int | None = None
        self.started_at: float | None = None
        self.lines: deque[tuple[int, str, bool]] = deque(maxlen=HELD_LINES)  # n, text, daemon
        self.last_n = 0
        self._keeper_n = 0  # the keeper numbers from 1 at each start
        self.roster = PlayerRoster(None)
        self.tree: ProcessTree | None = None
        self.samples = SampleStore(layout.samples / f"{server_id}.jsonl")
        self.ended = asyncio.Event()
        self._watch: asyncio.Task[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.transferring = False  # its data is being sent to another node: nothing starts

    @property
    def running(self) -> bool:
        return self.state != ServerState.STOPPED

    # Power ----------------------------------------------------------------------------------

    async def start(self, request: StartRequest) -> None:
        async with self._lock:
            if self.running:
                raise InvalidState(self.state)
            self._refuse_while_busy()
            self.sandboxing.check_can_start()
            template = self.catalog.get(request.game)
            settings_for(template, request.settings)  # refused before anything is touched
            try:
                await self._launch(request, ServerState.STARTING)
            except BaseException:
                self.state = ServerState.STOPPED  # nothing started: say so, not "starting"
                if self.intent is not None and self.keeper is None:
                    self.intent.active = False  # nothing for a later agent to reattach to
                    self.intent.save(self.run_dir)
                raise

    async def stop(self) -> None:
        async with self._lock:
            if self.state == ServerState.STOPPING:
                if self.intent is not None and self.intent.stop == StopReason.NODE:
                    self.intent.stop = StopReason.HALT  # asked for now: not started again after
                    self.intent.save(self.run_dir)  # a restore, and its exit is `halted`
                return
            if not self.running:
                raise InvalidState(self.state)
            await self._ask_to_stop(StopReason.HALT, ServerState.STOPPING)

    async def restart(self, request: StartRequest) -> None:
        async with self._lock:
            if self.state not in (ServerState.RUNNING, ServerState.STARTING):
                raise InvalidState(self.state)
            self._refuse_while_busy()
            template = self.catalog.get(request.game)
            settings_for(template, request.settings)
            assert self.intent is not None
            self.intent.restart_with = request
            await self._ask_to_stop(StopReason.RESTART, ServerState.RESTARTING)

    async def stop_for_node(self) -> None:
        """The agent is ending and takes its games with it."""
        async with self._lock:
            if self.running:
                await self._ask_to_stop(StopReason.NODE, ServerState.STOPPING)

    async def kill(self) -> None:
        """SIGKILL to the game's process group: the exit is a crash, nobody asked for it."""
        if not self.running or self.keeper is None:
            raise InvalidState(self.state)
        await self._signal(signal.SIGKILL)

    async def console(self, command: str) -> None:
        command = console_command_checked(command)
        if not self.running or self.keeper is None or self.template is None:
            raise InvalidState(self.state)
        if self.template.stop_command and command.strip() == self.template.stop_command:
            await self.stop()  # which sends that very command
            return
        await self._write(command)

    # Jobs on the server's data (`data_jobs.ServerData`) ---------------------------------------

    async def run_job(self, request: JobRequest) -> None:
        async with self._lock:  # not while a start or a stop is under way
            if self.transferring:
                raise Busy(self.state, "transfer")
            self.data.start_job(request, self.state, game=self)

    async def stop_for_job(self) -> None:
        """The game stopped by the node (`stopped_by_node`, as when the agent ends with its
        games), and its exit awaited."""
        async with self._lock:
            if self.state == ServerState.RUNNING:
                await self._ask_to_stop(StopReason.NODE, ServerState.STOPPING)
        await self.ended.wait()

    async def start_after_job(self) -> None:
        """The game, stopped by the job, started again as it last ran: `started_by_node`, then
        `ready` (or `failed_to_start`) as for any start. A game that crashed meanwhile, or
        that someone asked to stop, stays stopped."""
        async with self._lock:
            if self.running or self.intent is None or self.intent.stop != StopReason.NODE:
                return  # it runs, or ended otherwise than by the job's stop (a crash, a stop)
            self.report(self.server_id, ReportKind.STARTED_BY_NODE, {})
            await self._relaunch(self.intent.request, ServerState.STARTING)

    async def send_to(
        self, transfers: Transfers, target_url: str, ca_pem: str, token: str
    ) -> Archived:
        """The stopped server's data, sent to another node; no start or job meanwhile."""
        async with self._lock:
            if self.transferring:
                raise Busy(self.state, "transfer")
            self.data.refuse_while_job(self.state)
            if self.running:
                raise InvalidState(self.state)
            self.transferring = True
        try:
            return await transfers.send(self.server_id, self.state, target_url, ca_pem, token)
        finally:
            self.transferring = False

    def _refuse_while_busy(self) -> None:
        if self.transferring:
            raise Busy(self.state, "transfer")
        self.data.refuse_while_job(self.state)

    def put_settings(self, game: str, given: dict[str, Any]) -> dict[str, str]:
        return self.data.put_settings(game, given, self.state)

    async def _launch(self, request: StartRequest, state: ServerState) -> None:
        template = self.catalog.get(request.game)
        settings = settings_for(template, request.settings)
        # Its filesystem sized for this plan (DiskLimitExceeded: it holds more), off the loop.
        await asyncio.to_thread(self.layout.fit_disk, self.server_id, request.disk_mb)
        self.state = state
        self.template = template
        self.lines.clear()
        self.roster = PlayerRoster(template.players)
        self.ended.clear()
        self.keeper = None
        gid = self.layout.prepare_server(self.server_id, request.disk_mb)
        directory = self.layout.server_dir(self.server_id)
        write_settings(directory, template, settings, gid)
        run_dir = self.layout.prepare_run_dir(self.server_id)
        self.intent = Intent(request=request, line_base=self.last_n)
        self._keeper_n = 0
        self.intent.save(run_dir)
        game_files = self.layout.install_game_files(template)
        argv = self._command(template, request, game_files)
        root = self.memory_root
        spec: dict[str, Any] = {
            "server_id": self.server_id,
            "argv": argv,
            "env": dict(template.environment),  # unsandboxed: the game's own exec
            "cwd": str(directory),
            "uid": gid,  # the server's own id (None: the agent's user)
            "gid": gid,
            "memory_mb": request.memory_mb,
            "cgroup": str(root.path / self.server_id) if root else "",
            "cgroup_version": root.version if root else 0,
        }
        if self.sandboxing.sandboxed and root is not None:
            spec |= {
                "sandboxed": True,
                "cgroup_pids": str(root.pids / self.server_id) if root.pids else "",
                "cgroup_cpu": str(root.cpu / self.server_id) if root.cpu else "",
                "processes": request.processes + SANDBOX_PROCESSES,
                "cpu_percent": request.cpu_percent,
            }
            sandboxed = await self._sandbox(request, argv, directory, game_files, gid)
            spec |= self._helpers_spec(sandboxed)
        try:
            self.keeper = await self.spawn_keeper(run_dir, spec, self.zygote)
        except BaseException:
            await self._close_network()
            raise
        if self.intent.network is not None and self.networks is not None:
            keeper_pid = (self.keeper.game() or {}).get("keeper_pid")
            if isinstance(keeper_pid, int):
                self.networks.registry.note_keeper(Slot(self.intent.network[0]), keeper_pid)
        self._attach()

    async def _sandbox(
        self,
        request: StartRequest,
        argv: list[str],
        directory: Path,
        game_files: Path,
        gid: int | None,
    ) -> list[str]:
        """The game's network made, and `argv` run in its sandbox."""
        assert self.networks is not None and self.intent is not None
        assert self.template is not None and gid is not None
        owner = {"server_id": self.server_id, "data_dir": str(self.layout.root)}
        slot = await self.networks.open(owner, request.port)
        self.intent.network = [slot.number, request.port]
        self.intent.save(self.run_dir)
        box = GameBox(
            netns=slot.netns_path,
            server_dir=directory,
            game_files=game_files,
            uid=gid,
            gid=gid,
            memory_mb=request.memory_mb,
            environment=dict(self.template.environment),
        )
        return sandboxed_command(self.sandboxing, box, argv)

    def _helpers_spec(self, sandboxed: list[str]) -> dict[str, Any]:
        """How the keeper runs root's helpers of a sandboxed game: from `/`, with nothing of
        the template's (bubblewrap gives the game its environment), and the seccomp filter."""
        return {
            "argv": sandboxed,
            "env": {},
            "cwd": "/",
            "seccomp": {
                "path": self.sandboxing.seccomp_filter,
                "argument": seccomp_argument(sandboxed),
            },
        }

    async def _close_network(self) -> None:
        """The sandbox's network gone, once its game has ended (or never started)."""
        intent = self.intent
        if intent is None or intent.network is None or self.networks is None:
            return
        slot, port = intent.network
        try:
            await self.networks.close(Slot(slot), port)
        except Exception:  # the next agent's sweep removes what is left
            logger.exception("%s: cannot remove the game's network", self.server_id)
        intent.network = None
        intent.save(self.run_dir)

    def _command(
        self, template: GameTemplate, request: StartRequest, game_files: Path
    ) -> list[str]:
        values = {
            "{python}": game_python(),
            "{game_files}": GAME_FILES_INSIDE if self.sandboxing.sandboxed else str(game_files),
            "{port}": str(request.port),
            "{memory_mb}": str(request.memory_mb),
            "{server_id}": self.server_id,
        }
        # Whole placeholders only, each argument on its own: never a shell line.
        return [_substitute(argument, values) for argument in template.command]

    def _attach(self) -> None:
        assert self.keeper is not None and self.template is not None and self.intent is not None
        game = self.keeper.game() or {}
        self.pid = game.get("pid")
        self.started_at = parse_time(game.get("started_at"))
        self.tree = ProcessTree(self.pid) if self.pid else None
        self._watch = asyncio.get_running_loop().create_task(self._follow())
        if not self.intent.ready and self.intent.stop == StopReason.NONE:
            elapsed = time.time() - (self.started_at or time.time())
            self._arm(self._ready_deadline(self.template.ready_timeout_seconds - elapsed))
        elif self.intent.stop != StopReason.NONE:
            self._arm(self._kill_after(self.template.stop_timeout_seconds))

    async def _ask_to_stop(self, reason: StopReason, state: ServerState) -> None:
        assert self.intent is not None and self.template is not None
        self.intent.stop = reason
        self.intent.save(self.run_dir)
        self.state = state
        with contextlib.suppress(KeeperGone):
            if self.template.stop_command:
                await self._write(self.template.stop_command)
            else:
                await self._signal(signal.Signals[self.template.stop_signal])
        self._arm(self._kill_after(self.template.stop_timeout_seconds))

    def _arm(self, timer: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().create_task(timer)

    async def _ready_deadline(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
        if self.intent is not None and not self.intent.ready:
            logger.info("%s: no ready line in time; killing it", self.server_id)
            self.intent.stop = StopReason.FAIL
            self.intent.save(self.run_dir)
            with contextlib.suppress(KeeperGone):
                await self._signal(signal.SIGKILL)

    async def _kill_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        logger.info("%s: still running %s s after the stop; killing it", self.server_id, seconds)
        with contextlib.suppress(KeeperGone):
            await self._signal(signal.SIGKILL)

    async def _write(self, command: str) -> None:
        assert self.keeper is not None
        answer = await self.keeper.request({"op": "write", "text": command})
        if not answer.get("ok"):
            raise KeeperGone(str(answer.get("error")))

    async def _signal(self, number: int) -> None:
        assert self.keeper is not None
        await self.keeper.request({"op": "signal", "signal": int(number)})

    # The game's output and its end ----------------------------------------------------------

    async def _follow(self) -> None:
        assert self.keeper is not None
        handle = self.keeper
        while True:
            async for item in handle.follow(self._keeper_n):
                if "exit" in item:
                    await self._on_exit(item["exit"])
                    return
                self._on_line(int(item["n"]), str(item["text"]), item.get("daemon") is True)
            if (record := handle.exit_record()) is not None:
                await self._on_exit(record)
                return
            if not handle.keeper_alive():
                await self._on_exit(self._vanished_record())
                return
            await asyncio.sleep(0.1)  # the connection broke, the keeper lives: again

    def _on_line(self, n: int, text: str, daemon: bool = False) -> None:
        intent, template = self.intent, self.template
        if n <= self._keeper_n or intent is None or template is None:
            return
        self._keeper_n = n
        self.last_n = intent.line_base + n
        self.lines.append((self.last_n, text, daemon))
        if daemon:  # the keeper's notice: not the game's, so neither a player nor its ready
            return
        self.roster.on_line(text)
        if intent.ready:
            return
        if re.search(template.ready_pattern, text):
            intent.ready = True
            intent.save(self.run_dir)
            if intent.stop == StopReason.NONE:
                if self._timer is not None:
                    self._timer.cancel()
                self.state = ServerState.RUNNING
                self.report(self.server_id, ReportKind.READY, {"pid": self.pid})
                self.sample()  # the metrics have a first point at once, not 10 s later

    async def _on_exit(self, record: dict[str, Any]) -> None:
        if self._timer is not None:
            self._timer.cancel()
        intent = self.intent
        assert intent is not None
        await self._close_network()  # first: its report and its state then change at once
        kind = exit_kind(intent)
        if kind is not None:
            details = exit_details(record, intent)
            self.report(self.server_id, kind, details, exit_key=exit_key(record))
        intent.active = False
        # The keeper counted them all, also those of a run that ended while the agent was away.
        self.last_n = max(self.last_n, intent.line_base + int(record.get("lines") or 0))
        intent.last_line = self.last_n
        intent.save(self.run_dir)
        self.state = ServerState.STOPPED
        self.tree = None
        self.roster.clear()
        restart = intent.restart_with if intent.stop == StopReason.RESTART else None
        if restart is not None and await self._relaunch(restart, ServerState.RESTARTING):
            return
        self.ended.set()

    async def _relaunch(self, request: StartRequest, state: ServerState) -> bool:
        """A start the agent makes on its own (a restart's, a restore's); one that fails is
        reported `failed_to_start`."""
        try:
            await self._launch(request, state)
        except Exception as error:  # whatever stops it: a failed start
            logger.error("%s: start failed: %s", self.server_id, error)
            self.state = ServerState.STOPPED
            self.report(
                self.server_id,
                ReportKind.FAILED_TO_START,
                {"last_output": last_output([f"gshost-agent: {error}"])},
            )
            return False
        return True

    def _vanished_record(self) -> dict[str, Any]:
        """The keeper died without recording the exit (it was killed): the game, held by
        nobody, goes too, and what the console log kept is its last output."""
        assert self.keeper is not None
        game = self.keeper.game() or {}
        if game.get("pid") and self.identity.uid is not None:
            with contextlib.suppress(OSError):
                os.killpg(int(game["pid"]), signal.SIGKILL)
        return {
            "pid": game.get("pid"),
            "started_at": game.get("started_at"),
            "exit_code": None,
            "signal": None,
            "oom": False,
            "last_output": last_output(self.keeper.console_log_tail(LAST_OUTPUT_LINES)),
        }

    # Reattaching after the agent came back ----------------------------------------------------

    async def resume(self) -> None:
        """Picks up what the agent before this one left in the run directory."""
        intent = Intent.load(self.run_dir)
        if intent is None:
            return
        self.intent = intent
        self.template = self.catalog.get(intent.request.game)
        self.roster = PlayerRoster(self.template.players)
        if not intent.active:  # it ended and was reported: stopped, numbered on from there
            self.last_n = intent.last_line
            await self._close_network()  # where the agent before ended before it could
            return
        self.keeper = self.attach_keeper(self.run_dir)
        self.last_n = intent.line_base
        if intent.stop in (StopReason.HALT, StopReason.NODE):
            self.state = ServerState.STOPPING
        elif intent.stop == StopReason.RESTART:
            self.state = ServerState.RESTARTING
        else:
            self.state = ServerState.RUNNING if intent.ready else ServerState.STARTING
        self._attach()
        if intent.ready and self.template.players is not None:
            with contextlib.suppress(KeeperGone):
                await self._write(self.template.players.command)

    # Readings -------------------------------------------------------------------------------

    async def players(self) -> dict[str, Any]:
        template = self.template
        fresh = time.monotonic() - self.roster.answered_at < PLAYERS_FRESH_SECONDS
        if self.state == ServerState.RUNNING and template and template.players and not fresh:
            self.roster.answered.clear()
            with contextlib.suppress(KeeperGone):
                await self._write(template.players.command)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.roster.answered.wait(), PLAYERS_ANSWER_SECONDS)
        listing = self.roster.listing()
        return {"count": len(listing), "max": self.max_players(), "players": listing}

    def max_players(self) -> int | None:
        template = self.template
        if template is None or template.players is None or not template.players.max_setting:
            return None
        key = template.players.max_setting
        settings = read_settings(self.layout.server_dir(self.server_id), template)
        for value in (settings.get(key, ""), template.default_settings().get(key, "")):
            if value.isdigit():
                return int(value)
        return None

    def settings(self) -> dict[str, str]:
        template = self.template
        if template is None and (intent := Intent.load(self.run_dir)) is not None:
            template = self.catalog.get(intent.request.game)
        template = template or self.data.noted_template()
        if template is None:
            return {}
        return read_settings(self.layout.server_dir(self.server_id), template)

    def stats(self) -> dict[str, Any]:
        cpu, memory = self.tree.usage() if self.tree and self.running else (0.0, 0.0)
        uptime = 0
        if self.running and self.started_at is not None:
            uptime = int(time.time() - self.started_at)
        return {
            "state": str(self.state),
            "sampled_at": format_time(),
            "cpu_percent": cpu,
            "memory_mb": memory,
            "memory_limit_mb": self.intent.request.memory_mb if self.intent else None,
            "disk_mb": self.layout.disk_used_mb(self.server_id),
            "network_in_kbps": None,
            "network_out_kbps": None,
            "players_online": len(self.roster.players),
            "uptime_seconds": uptime,
        }

    async def watch_disk(self) -> None:
        """A game whose directory holds more than its plan's disk_mb is stopped (killed: what
        it would write on a clean stop would only add to it), reported as crashed with
        `"reason": "disk_limit"`; it does not start again while it is over. Only where the
        directory is no filesystem of its own (unsandboxed): elsewhere the kernel refuses the
        writes."""
        intent = self.intent
        if self.state != ServerState.RUNNING or intent is None or intent.disk_limit:
            return
        if self.layout.disks is not None:
            return
        used = await asyncio.to_thread(self.layout.disk_used_mb, self.server_id)
        if used <= intent.request.disk_mb:
            return
        logger.warning(
            "%s: its directory holds %.0f MB, over its limit of %s MB: stopping it",
            self.server_id, used, intent.request.disk_mb,
        )  # fmt: skip
        intent.disk_limit = True
        intent.save(self.run_dir)
        with contextlib.suppress(KeeperGone):
            await self._signal(signal.SIGKILL)

    def sample(self) -> None:
        if self.state == ServerState.STOPPED or self.tree is None:
            return
        cpu, memory = self.tree.usage()
        self.samples.add(Sample(time.time(), cpu, memory, len(self.roster.players)))

    def console_after(self, after: int, limit: int = 200) -> dict[str, Any]:
        lines = [_console_line(*line) for line in self.lines if line[0] > after][:limit]
        return {"lines": lines, "last": self.last_n}


def _console_line(n: int, text: str, daemon: bool) -> dict[str, Any]:
    return {"n": n, "text": text, "daemon": True} if daemon else {"n": n, "text": text}


def _substitute(argument: str, values: dict[str, str]) -> str:
    for placeholder, value in values.items():
        argument = argument.replace(placeholder, value)
    return argument
