"""One object per game server owning its state, its power and its exits (in the manner of
Wings' server/power.go and crash.go); its console is a `ConsoleHistory`, its readings a
`GameReadings`, and a launch goes through the node's `Launcher`.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gshost_agent.archives import Archived
from gshost_agent.console_history import ConsoleHistory, LineListener
from gshost_agent.data_jobs import JobThreads, ServerData
from gshost_agent.exits import exit_details, exit_key, exit_kind
from gshost_agent.game_readings import GameReadings, max_players
from gshost_agent.keepers import KeeperGone, KeeperHandle
from gshost_agent.launcher import Launch, Launcher
from gshost_agent.layout import GameIdentity, Layout
from gshost_agent.protocol import (
    LAST_OUTPUT_LINES,
    ConsoleOutput,
    JobRequest,
    ReportKind,
    ServerState,
    StartRequest,
    Stats,
    last_output,
    parse_time,
)
from gshost_agent.readings import SampleStore
from gshost_agent.server_state import (
    Busy,
    Intent,
    InvalidState,
    Reporter,
    StopReason,
    console_command_checked,
)
from gshost_agent.settings_files import read_settings, settings_for, write_settings
from gshost_agent.templates import GameCatalog, GameTemplate
from gshost_agent.transfers import Transfers

logger = logging.getLogger("gshost_agent.supervisor")

# How a new agent reaches the keeper an earlier one left (run directory): `KeeperHandle`. The
# unit tests pass a fake.
KeeperAttacher = Callable[[Path], KeeperHandle]


class Supervisor:
    def __init__(
        self,
        *,
        server_id: str,
        layout: Layout,
        identity: GameIdentity,
        report: Reporter,
        catalog: GameCatalog,
        jobs: JobThreads,
        launcher: Launcher,
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
        self.launcher = launcher
        self.attach_keeper = attach_keeper
        self.report = report
        self.run_dir = layout.run_dir(server_id)
        self.console_history = ConsoleHistory()
        # Told each change of state, on the event loop, as it happens: the server's live
        # console sockets (console_socket.py), as `console_listeners` are told each line.
        self.state_listeners: list[Callable[[ServerState], None]] = []
        self._state = ServerState.STOPPED
        self.intent: Intent | None = None
        self.template: GameTemplate | None = None
        self.keeper: KeeperHandle | None = None
        self.pid: int | None = None
        self.readings = GameReadings(SampleStore(layout.samples / f"{server_id}.jsonl"))
        self.ended = asyncio.Event()
        self._watch: asyncio.Task[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.transferring = False  # its data is being sent to another node: nothing starts

    @property
    def state(self) -> ServerState:
        return self._state

    @state.setter
    def state(self, state: ServerState) -> None:
        changed, self._state = state != self._state, state
        if changed:
            for listener in list(self.state_listeners):
                listener(state)

    @property
    def running(self) -> bool:
        return self.state != ServerState.STOPPED

    @property
    def console_listeners(self) -> list[LineListener]:
        return self.console_history.listeners

    @property
    def lines(self) -> deque[tuple[int, str, bool]]:
        return self.console_history.lines

    @property
    def last_n(self) -> int:
        return self.console_history.last_n

    # Power ----------------------------------------------------------------------------------

    async def start(self, request: StartRequest) -> None:
        async with self._lock:
            if self.running:
                raise InvalidState(self.state)
            self._refuse_while_busy()
            self.launcher.sandboxing.check_can_start()
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
        # Its directory, and its filesystem sized for this plan (DiskLimitExceeded: it holds
        # more), off the loop.
        uid = await asyncio.to_thread(self.layout.fit_disk, self.server_id, request.disk_mb)
        self.state = state
        self.template = template
        self.readings.run_begins(template)
        self.ended.clear()
        self.keeper = None
        directory = self.layout.server_dir(self.server_id)
        write_settings(directory, template, settings, uid)
        run_dir = self.layout.prepare_run_dir(self.server_id)
        self.intent = Intent(request=request, line_base=self.console_history.run_begins())
        launch = Launch(self.server_id, request, template, self.intent, directory, run_dir, uid)
        self.keeper = await self.launcher.launch(launch)
        self._attach()

    async def _close_network(self) -> None:
        await self.launcher.close_network(self.server_id, self.intent, self.run_dir)

    def _attach(self) -> None:
        assert self.keeper is not None and self.template is not None and self.intent is not None
        game = self.keeper.game() or {}
        self.pid = game.get("pid")
        started_at = parse_time(game.get("started_at"))
        self.readings.follow(self.pid, started_at)
        self._watch = asyncio.get_running_loop().create_task(self._follow())
        if not self.intent.ready and self.intent.stop == StopReason.NONE:
            elapsed = time.time() - (started_at or time.time())
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
            async for item in handle.follow(self.console_history.keeper_n):
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
        if intent is None or template is None or not self.console_history.take(n, text, daemon):
            return
        if daemon:  # the keeper's notice: not the game's, so neither a player nor its ready
            return
        self.readings.on_line(text)
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
        intent.last_line = self.console_history.run_ended(int(record.get("lines") or 0))
        intent.save(self.run_dir)
        self.state = ServerState.STOPPED
        self.readings.run_ended()
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
        self.readings.run_begins(self.template)
        if not intent.active:  # it ended and was reported: stopped, numbered on from there
            self.console_history.last_n = intent.last_line
            await self._close_network()  # where the agent before ended before it could
            return
        self.keeper = self.attach_keeper(self.run_dir)
        self.console_history.run_resumed(intent.line_base)
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
        async def ask(command: str) -> None:
            with contextlib.suppress(KeeperGone):
                await self._write(command)

        running = self.state == ServerState.RUNNING
        listing = await self.readings.players(self.template, running, ask)
        return {"count": len(listing), "max": self.max_players(), "players": listing}

    def max_players(self) -> int | None:
        return max_players(self.layout.server_dir(self.server_id), self.template)

    def settings(self) -> dict[str, str]:
        template = self.template
        if template is None and (intent := Intent.load(self.run_dir)) is not None:
            template = self.catalog.get(intent.request.game)
        template = template or self.data.noted_template()
        if template is None:
            return {}
        return read_settings(self.layout.server_dir(self.server_id), template)

    def stats(self) -> Stats:
        memory_limit_mb = self.intent.request.memory_mb if self.intent else None
        disk_used_mb = self.layout.disk_used_mb(self.server_id)
        return self.readings.stats(self.state, memory_limit_mb, disk_used_mb)

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
        self.readings.sample(self.state)

    def console_after(self, after: int, limit: int = 200) -> ConsoleOutput:
        return self.console_history.after(after, limit)
