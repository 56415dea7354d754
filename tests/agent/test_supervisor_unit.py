"""The state machine of one game server (``gshost_agent.supervisor.Supervisor``), with a fake
keeper the test drives: it prints the game's lines, ends the game with an exit record, and
records what the supervisor asked of it. No process is started.

States: stopped → starting → running (its ready line) → stopping / restarting → stopped.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from gshost_agent.data_jobs import JobThreads
from gshost_agent.launcher import Launcher
from gshost_agent.layout import GameIdentity, Layout
from gshost_agent.protocol import ReportKind, ServerState, format_time
from gshost_agent.server_state import (
    Busy,
    DiskLimitExceeded,
    InvalidCommand,
    InvalidState,
    StartRequest,
)
from gshost_agent.supervisor import Supervisor
from gshost_agent.templates import GameCatalog, UnknownGame

SERVER = "srv_unit0001"
# Games of the test's own (as an operator's AGENT_GAMES_DIR): no files, no settings.
TEMPLATES = {
    "steady": """
name = "steady"
command = ["{python}", "game.py"]
ready_pattern = '^ready$'
stop_command = "quit"
stop_timeout_seconds = 60
""",
    # Its stop is a signal, not a console command.
    "signalled": """
name = "signalled"
command = ["{python}", "game.py"]
ready_pattern = '^ready$'
stop_command = ""
stop_signal = "SIGINT"
""",
    # No grace at all: a stop is followed by a kill at once, unless it has ended.
    "graceless": """
name = "graceless"
command = ["{python}", "game.py"]
ready_pattern = '^ready$'
stop_command = "quit"
stop_timeout_seconds = 0
""",
    # No time at all for its ready line.
    "hasty": """
name = "hasty"
command = ["{python}", "game.py"]
ready_pattern = '^ready$'
ready_timeout_seconds = 0
""",
}
STEADY = StartRequest(game="steady", port=27015, memory_mb=256)
KILL = {"op": "signal", "signal": int(signal.SIGKILL)}
WAIT_SECONDS = 2.0  # a safety net: every wait below ends at once when the code is right


class FakeKeeper:
    """A keeper as the supervisor sees it (`KeeperHandle`'s methods), driven by the test."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.started_at = format_time()
        self.requests: list[dict[str, Any]] = []
        self.alive = True
        self.console_log: list[str] = []
        self._record: dict[str, Any] | None = None
        self._items: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._asked = asyncio.Event()
        self._printed = 0

    # What the supervisor calls.

    def game(self) -> dict[str, Any]:
        return {"pid": self.pid, "keeper_pid": self.pid + 1, "started_at": self.started_at}

    def exit_record(self) -> dict[str, Any] | None:
        return self._record

    def keeper_alive(self) -> bool:
        return self.alive

    async def request(self, request: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        self.requests.append(request)
        self._asked.set()
        return {"ok": True}

    async def follow(self, after: int) -> Any:
        while (item := await self._items.get()) is not None:
            yield item
            self._items.task_done()  # asked for the next one: this one is dealt with

    def console_log_tail(self, count: int) -> list[str]:
        return self.console_log[-count:]

    # What the test does.

    async def prints(self, *lines: str) -> None:
        """The game prints `lines`; back once the supervisor has read them."""
        for text in lines:
            self._printed += 1
            self.console_log.append(text)
            self._items.put_nowait({"n": self._printed, "text": text})
        await asyncio.wait_for(self._items.join(), WAIT_SECONDS)

    def exits(self, **record: Any) -> None:
        """The game ends; the keeper records it and tells the supervisor."""
        self._record = {"pid": self.pid, "started_at": self.started_at, "lines": self._printed}
        self._record |= record
        self._items.put_nowait({"exit": self._record})

    def vanishes(self) -> None:
        """The keeper is killed: no exit record, no more answers."""
        self.alive = False
        self._items.put_nowait(None)

    async def asked_for(self, request: dict[str, Any]) -> None:
        """Back once the supervisor has asked the keeper for `request`."""

        async def arrival() -> None:
            while request not in self.requests:
                self._asked.clear()
                await self._asked.wait()

        await asyncio.wait_for(arrival(), WAIT_SECONDS)

    def writes(self) -> list[str]:
        return [str(r["text"]) for r in self.requests if r["op"] == "write"]

    def signals(self) -> list[int]:
        return [int(r["signal"]) for r in self.requests if r["op"] == "signal"]


class FakeKeepers:
    """The supervisor's `spawn_keeper`: one fake keeper per start, or an error when told to."""

    def __init__(self) -> None:
        self.spawned: list[FakeKeeper] = []
        self.specs: list[dict[str, Any]] = []
        self.failure: Exception | None = None
        self._new = asyncio.Event()

    async def __call__(self, run_dir: Path, spec: dict[str, Any], zygote: Any) -> FakeKeeper:
        if self.failure is not None:
            raise self.failure
        self.specs.append(spec)
        self.spawned.append(FakeKeeper(pid=1000 + len(self.spawned)))
        self._new.set()
        return self.spawned[-1]

    @property
    def last(self) -> FakeKeeper:
        return self.spawned[-1]

    async def count(self, number: int) -> None:
        """Back once `number` keepers have been spawned."""

        async def arrival() -> None:
            while len(self.spawned) < number:
                self._new.clear()
                await self._new.wait()

        await asyncio.wait_for(arrival(), WAIT_SECONDS)


class Game:
    """A supervisor on a data directory of its own, its keepers and the reports it made."""

    def __init__(self, root: Path) -> None:
        games = root / "templates"
        games.mkdir()
        for name, text in TEMPLATES.items():
            (games / f"{name}.toml").write_text(text)
        identity = GameIdentity(uid=None)
        self.layout = Layout(root / "data", identity)
        self.layout.prepare()
        self.keepers = FakeKeepers()
        self.reports: list[tuple[ReportKind, dict[str, Any], str | None]] = []
        self.jobs = JobThreads(1)
        self.catalog = GameCatalog(games)
        self.supervisor = self.new_supervisor()

    def new_supervisor(self) -> Supervisor:
        """The agent's supervisor of the server; one that reattaches finds the last keeper."""
        return Supervisor(
            server_id=SERVER,
            layout=self.layout,
            identity=self.layout.identity,
            report=self.record,
            catalog=self.catalog,
            jobs=self.jobs,
            launcher=Launcher(layout=self.layout, memory_root=None, spawn_keeper=self.keepers),
            attach_keeper=lambda run_dir: self.keepers.last,  # type: ignore[arg-type,return-value]
        )

    async def agent_again(self) -> Supervisor:
        """The agent is killed and started again: its keepers live on, and its new
        supervisor reattaches to what the run directory says."""
        gone = self.supervisor
        for task in (gone._watch, gone._timer):
            if task is not None:
                task.cancel()
        self.supervisor = self.new_supervisor()
        await self.supervisor.resume()
        return self.supervisor

    def record(
        self,
        server_id: str,
        kind: ReportKind,
        details: dict[str, Any],
        *,
        exit_key: str | None = None,
    ) -> None:
        assert server_id == SERVER
        self.reports.append((kind, details, exit_key))

    @property
    def state(self) -> ServerState:
        return self.supervisor.state

    @property
    def keeper(self) -> FakeKeeper:
        return self.keepers.last

    def kinds(self) -> list[ReportKind]:
        return [kind for kind, _, _ in self.reports]

    def last_report(self) -> dict[str, Any]:
        return self.reports[-1][1]

    async def ended(self) -> None:
        await asyncio.wait_for(self.supervisor.ended.wait(), WAIT_SECONDS)

    # The states, reached as the agent reaches them.

    async def starting(self, request: StartRequest = STEADY) -> Game:
        await self.supervisor.start(request)
        return self

    async def running(self, request: StartRequest = STEADY) -> Game:
        await self.starting(request)
        await self.keeper.prints("ready")
        return self

    async def stopping(self) -> Game:
        await self.running()
        await self.supervisor.stop()
        return self

    async def restarting(self) -> Game:
        await self.running()
        await self.supervisor.restart(STEADY)
        return self

    async def in_state(self, state: ServerState) -> Game:
        reach = {
            ServerState.STOPPED: self.stays_stopped,
            ServerState.STARTING: self.starting,
            ServerState.RUNNING: self.running,
            ServerState.STOPPING: self.stopping,
            ServerState.RESTARTING: self.restarting,
        }
        await reach[state]()
        assert self.state == state
        return self

    async def stays_stopped(self) -> Game:
        return self


def run(test: Callable[[Game], Coroutine[Any, Any, None]], tmp_path: Path) -> None:
    """`test` on a new game, in an event loop of its own (no pytest-asyncio here)."""

    async def main() -> None:
        game = Game(tmp_path)
        try:
            await test(game)
        finally:
            game.jobs.close()

    asyncio.run(main())


ACTIONS: dict[str, Callable[[Supervisor], Awaitable[None]]] = {
    "start": lambda supervisor: supervisor.start(STEADY),
    "stop": lambda supervisor: supervisor.stop(),
    "restart": lambda supervisor: supervisor.restart(STEADY),
    "kill": lambda supervisor: supervisor.kill(),
    "command": lambda supervisor: supervisor.console("say hello"),
}


# Which states refuse which actions ---------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "action"),
    [
        (ServerState.STARTING, "start"),
        (ServerState.RUNNING, "start"),
        (ServerState.STOPPING, "start"),
        (ServerState.RESTARTING, "start"),
        (ServerState.STOPPED, "stop"),
        (ServerState.STOPPED, "restart"),
        (ServerState.STOPPING, "restart"),
        (ServerState.RESTARTING, "restart"),
        (ServerState.STOPPED, "kill"),
        (ServerState.STOPPED, "command"),
    ],
)
def test_an_action_its_state_refuses_raises_invalid_state_and_changes_nothing(
    tmp_path: Path, state: ServerState, action: str
) -> None:
    async def test(game: Game) -> None:
        await game.in_state(state)
        spawned, reports = len(game.keepers.spawned), len(game.reports)
        asked = len(game.keeper.requests) if spawned else 0

        with pytest.raises(InvalidState) as refusal:
            await ACTIONS[action](game.supervisor)

        assert refusal.value.state == state
        assert str(refusal.value) == f"the server is {state}"
        assert game.state == state
        assert len(game.keepers.spawned) == spawned and len(game.reports) == reports
        assert (len(game.keeper.requests) if spawned else 0) == asked

    run(test, tmp_path)


@pytest.mark.parametrize("action", ["stop", "restart", "kill", "command"])
def test_a_game_that_ended_refuses_what_only_a_live_game_accepts(
    tmp_path: Path, action: str
) -> None:
    async def test(game: Game) -> None:
        await game.running()
        game.keeper.exits(exit_code=0)
        await game.ended()

        with pytest.raises(InvalidState):
            await ACTIONS[action](game.supervisor)

        assert game.keeper.requests == []

    run(test, tmp_path)


@pytest.mark.parametrize(
    ("state", "action", "after"),
    [
        (ServerState.STOPPED, "start", ServerState.STARTING),
        (ServerState.STARTING, "stop", ServerState.STOPPING),
        (ServerState.RUNNING, "stop", ServerState.STOPPING),
        (ServerState.STOPPING, "stop", ServerState.STOPPING),
        (ServerState.RESTARTING, "stop", ServerState.STOPPING),
        (ServerState.STARTING, "restart", ServerState.RESTARTING),
        (ServerState.RUNNING, "restart", ServerState.RESTARTING),
        (ServerState.STARTING, "kill", ServerState.STARTING),
        (ServerState.RUNNING, "kill", ServerState.RUNNING),
        (ServerState.STOPPING, "kill", ServerState.STOPPING),
        (ServerState.RESTARTING, "kill", ServerState.RESTARTING),
        (ServerState.STARTING, "command", ServerState.STARTING),
        (ServerState.RUNNING, "command", ServerState.RUNNING),
        (ServerState.STOPPING, "command", ServerState.STOPPING),
        (ServerState.RESTARTING, "command", ServerState.RESTARTING),
    ],
)
def test_an_action_its_state_accepts_leads_to_the_next_state(
    tmp_path: Path, state: ServerState, action: str, after: ServerState
) -> None:
    async def test(game: Game) -> None:
        await game.in_state(state)

        await ACTIONS[action](game.supervisor)

        assert game.state == after

    run(test, tmp_path)


# What each action asks of the keeper -------------------------------------------------------


@pytest.mark.parametrize(
    ("game_name", "action", "request_sent"),
    [
        ("steady", "stop", {"op": "write", "text": "quit"}),
        ("signalled", "stop", {"op": "signal", "signal": int(signal.SIGINT)}),
        ("steady", "restart", {"op": "write", "text": "quit"}),
        ("signalled", "restart", {"op": "signal", "signal": int(signal.SIGINT)}),
        ("steady", "kill", KILL),
        ("steady", "command", {"op": "write", "text": "say hello"}),
    ],
)
def test_each_action_asks_the_keeper_for_one_thing(
    tmp_path: Path, game_name: str, action: str, request_sent: dict[str, Any]
) -> None:
    async def test(game: Game) -> None:
        await game.running(StartRequest(game=game_name, port=27015, memory_mb=256))

        await ACTIONS[action](game.supervisor)

        assert game.keeper.requests == [request_sent]

    run(test, tmp_path)


def test_a_stop_while_stopping_asks_nothing_more(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.stopping()

        await game.supervisor.stop()

        assert game.keeper.writes() == ["quit"]

    run(test, tmp_path)


def test_the_stop_command_typed_in_the_console_is_a_stop(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.running()

        await game.supervisor.console("quit")
        game.keeper.exits(exit_code=0)
        await game.ended()

        assert game.kinds() == [ReportKind.READY, ReportKind.HALTED]

    run(test, tmp_path)


@pytest.mark.parametrize("command", ["", "   ", "x" * 1001, "say\nhello", "bell\a"])
def test_a_command_that_is_not_one_printable_line_never_reaches_the_game(
    tmp_path: Path, command: str
) -> None:
    async def test(game: Game) -> None:
        await game.running()

        with pytest.raises(InvalidCommand):
            await game.supervisor.console(command)

        assert game.keeper.requests == []

    run(test, tmp_path)


# Starting ----------------------------------------------------------------------------------


def test_a_start_spawns_a_keeper_for_the_game_s_command(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.starting()

        (spec,) = game.keepers.specs
        assert spec["server_id"] == SERVER
        assert spec["argv"][1:] == ["game.py"]
        assert spec["memory_mb"] == STEADY.memory_mb
        assert spec["cwd"] == str(game.layout.server_dir(SERVER))

    run(test, tmp_path)


@pytest.mark.parametrize(
    ("refusal", "prepare", "request_made"),
    [
        (UnknownGame, lambda game: None, StartRequest(game="nosuch", port=1, memory_mb=1)),
        (Busy, lambda game: setattr(game.supervisor, "transferring", True), STEADY),
        (
            DiskLimitExceeded,
            lambda game: (game.layout.server_dir(SERVER) / "big").write_bytes(bytes(2 << 20)),
            StartRequest(game="steady", port=1, memory_mb=1, disk_mb=1),
        ),
    ],
    ids=["unknown game", "data being sent away", "directory over its disk limit"],
)
def test_a_start_refused_before_anything_is_touched_spawns_no_keeper(
    tmp_path: Path,
    refusal: type[Exception],
    prepare: Callable[[Game], None],
    request_made: StartRequest,
) -> None:
    async def test(game: Game) -> None:
        game.layout.server_dir(SERVER).mkdir()
        prepare(game)

        with pytest.raises(refusal):
            await game.supervisor.start(request_made)

        assert game.state == ServerState.STOPPED
        assert game.keepers.spawned == [] and game.reports == []

    run(test, tmp_path)


def test_a_start_whose_keeper_cannot_be_spawned_stays_stopped(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        game.keepers.failure = OSError("no keeper")

        with pytest.raises(OSError, match="no keeper"):
            await game.supervisor.start(STEADY)

        assert game.state == ServerState.STOPPED
        assert game.supervisor.intent is not None and not game.supervisor.intent.active
        assert game.reports == []

    run(test, tmp_path)


def test_the_ready_line_moves_starting_to_running_and_reports_ready(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.starting()

        await game.keeper.prints("loading", "still loading")
        assert (game.state, game.reports) == (ServerState.STARTING, [])
        await game.keeper.prints("ready")

        assert game.state == ServerState.RUNNING
        assert game.reports == [(ReportKind.READY, {"pid": game.keeper.pid}, None)]

    run(test, tmp_path)


def test_a_second_ready_line_reports_nothing_more(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.running()

        await game.keeper.prints("ready")

        assert game.kinds() == [ReportKind.READY]

    run(test, tmp_path)


def test_a_game_without_its_ready_line_in_time_is_killed_and_failed_to_start(
    tmp_path: Path,
) -> None:
    async def test(game: Game) -> None:
        await game.starting(StartRequest(game="hasty", port=27015, memory_mb=256))

        await game.keeper.asked_for(KILL)
        game.keeper.exits(signal=int(signal.SIGKILL))
        await game.ended()

        assert game.kinds() == [ReportKind.FAILED_TO_START]
        assert game.state == ServerState.STOPPED

    run(test, tmp_path)


def test_console_lines_are_numbered_on_from_the_previous_run(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.running()
        await game.keeper.prints("one", "two")
        game.keeper.exits(exit_code=0)
        await game.ended()

        await game.running()

        assert game.supervisor.console_after(0).to_json()["lines"][-1] == {"n": 4, "text": "ready"}
        assert game.supervisor.console_after(3).to_json() == {
            "lines": [{"n": 4, "text": "ready"}],
            "last": 4,
        }

    run(test, tmp_path)


# How a run ends, and what is reported ------------------------------------------------------


async def crash_while_running(game: Game) -> None:
    await game.running()
    game.keeper.exits(exit_code=1)


async def exit_before_the_ready_line(game: Game) -> None:
    await game.starting()
    game.keeper.exits(exit_code=3)


async def stop_while_running(game: Game) -> None:
    await game.running()
    await game.supervisor.stop()
    game.keeper.exits(exit_code=0)


async def stop_while_starting(game: Game) -> None:
    await game.starting()
    await game.supervisor.stop()
    game.keeper.exits(exit_code=0)


async def stop_for_the_node(game: Game) -> None:
    await game.running()
    await game.supervisor.stop_for_node()
    game.keeper.exits(exit_code=0)


async def stop_asked_while_the_node_stops_it(game: Game) -> None:
    await game.running()
    await game.supervisor.stop_for_node()
    await game.supervisor.stop()
    game.keeper.exits(exit_code=0)


async def stop_during_a_restart(game: Game) -> None:
    await game.restarting()
    await game.supervisor.stop()
    game.keeper.exits(exit_code=0)


async def kill_while_running(game: Game) -> None:
    await game.running()
    await game.supervisor.kill()
    game.keeper.exits(signal=int(signal.SIGKILL))


@pytest.mark.parametrize(
    ("ending", "kinds"),
    [
        (crash_while_running, [ReportKind.READY, ReportKind.CRASHED]),
        (exit_before_the_ready_line, [ReportKind.FAILED_TO_START]),
        (stop_while_running, [ReportKind.READY, ReportKind.HALTED]),
        (stop_while_starting, [ReportKind.HALTED]),
        (stop_for_the_node, [ReportKind.READY, ReportKind.STOPPED_BY_NODE]),
        (stop_asked_while_the_node_stops_it, [ReportKind.READY, ReportKind.HALTED]),
        (stop_during_a_restart, [ReportKind.READY, ReportKind.HALTED]),
        (kill_while_running, [ReportKind.READY, ReportKind.CRASHED]),
    ],
    ids=lambda value: "+".join(value) if isinstance(value, list) else None,
)
def test_what_the_agent_wanted_decides_the_reports_of_a_run_and_it_ends_stopped(
    tmp_path: Path, ending: Callable[[Game], Awaitable[None]], kinds: list[ReportKind]
) -> None:
    async def test(game: Game) -> None:
        await ending(game)
        await game.ended()

        assert game.kinds() == kinds
        assert game.state == ServerState.STOPPED
        assert game.supervisor.intent is not None and not game.supervisor.intent.active

    run(test, tmp_path)


@pytest.mark.parametrize(
    "record",
    [
        {"exit_code": 3, "signal": None, "oom": False},
        {"exit_code": None, "signal": 11, "oom": False},
        {"exit_code": None, "signal": 9, "oom": True},
    ],
    ids=["exit code", "signal", "out of memory"],
)
def test_the_exit_record_s_code_signal_and_oom_reach_the_report(
    tmp_path: Path, record: dict[str, Any]
) -> None:
    async def test(game: Game) -> None:
        await game.running()

        game.keeper.exits(**record)
        await game.ended()

        kind, details, key = game.reports[-1]
        assert kind == ReportKind.CRASHED
        assert {name: details[name] for name in record} == record
        assert details["pid"] == game.keeper.pid
        assert key == f"{game.keeper.pid}@{game.keeper.started_at}"
        assert "reason" not in details

    run(test, tmp_path)


def test_a_game_over_its_disk_limit_is_killed_and_crashed_for_that_reason(
    tmp_path: Path,
) -> None:
    async def test(game: Game) -> None:
        await game.running(StartRequest(game="steady", port=27015, memory_mb=256, disk_mb=1))
        (game.layout.server_dir(SERVER) / "world.dat").write_bytes(bytes(2 << 20))

        await game.supervisor.watch_disk()
        assert game.keeper.requests == [KILL]
        game.keeper.exits(signal=int(signal.SIGKILL))
        await game.ended()

        assert game.kinds() == [ReportKind.READY, ReportKind.CRASHED]
        assert game.last_report()["reason"] == "disk_limit"

    run(test, tmp_path)


def test_a_game_within_its_disk_limit_is_left_alone(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.running()

        await game.supervisor.watch_disk()

        assert game.keeper.requests == []

    run(test, tmp_path)


def test_a_vanished_keeper_is_a_crash_with_the_console_log_s_last_lines(
    tmp_path: Path,
) -> None:
    async def test(game: Game) -> None:
        await game.running()
        await game.keeper.prints(*(f"line {n}" for n in range(12)))

        game.keeper.vanishes()
        await game.ended()

        kind, details, _ = game.reports[-1]
        assert kind == ReportKind.CRASHED
        assert (details["exit_code"], details["signal"], details["oom"]) == (None, None, False)
        assert details["last_output"] == [f"line {n}" for n in range(2, 12)]

    run(test, tmp_path)


# Stopping within the grace, or killed --------------------------------------------------------


def test_a_game_that_does_not_stop_within_its_grace_is_killed(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.running(StartRequest(game="graceless", port=27015, memory_mb=256))

        await game.supervisor.stop()
        await game.keeper.asked_for(KILL)
        game.keeper.exits(signal=int(signal.SIGKILL))
        await game.ended()

        assert game.keeper.requests == [{"op": "write", "text": "quit"}, KILL]
        assert game.kinds() == [ReportKind.READY, ReportKind.HALTED]

    run(test, tmp_path)


def test_a_game_that_obeys_its_stop_command_is_halted_without_a_signal(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.stopping()

        game.keeper.exits(exit_code=0)
        await game.ended()

        assert game.keeper.signals() == []
        assert game.kinds() == [ReportKind.READY, ReportKind.HALTED]

    run(test, tmp_path)


# Restarting ----------------------------------------------------------------------------------


def test_a_restart_reports_no_end_and_its_new_run_ready(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.restarting()
        first = game.keeper

        first.exits(exit_code=0)
        await game.keepers.count(2)
        assert (game.state, game.kinds()) == (ServerState.RESTARTING, [ReportKind.READY])
        await game.keeper.prints("ready")

        assert game.state == ServerState.RUNNING
        assert game.kinds() == [ReportKind.READY, ReportKind.READY]
        assert game.last_report() == {"pid": game.keeper.pid}
        assert game.keeper is not first

    run(test, tmp_path)


def test_a_restart_that_cannot_start_again_is_failed_to_start(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.restarting()
        game.keepers.failure = OSError("no keeper")

        game.keeper.exits(exit_code=0)
        await game.ended()

        assert game.kinds() == [ReportKind.READY, ReportKind.FAILED_TO_START]
        assert game.last_report()["last_output"] == ["gshost-agent: no keeper"]
        assert game.state == ServerState.STOPPED

    run(test, tmp_path)


# A job that stops the game and starts it again ---------------------------------------------


def test_a_game_a_job_stopped_starts_again_as_started_by_node(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.running()
        stopping = asyncio.get_running_loop().create_task(game.supervisor.stop_for_job())
        await game.keeper.asked_for({"op": "write", "text": "quit"})
        game.keeper.exits(exit_code=0)
        await asyncio.wait_for(stopping, WAIT_SECONDS)

        await game.supervisor.start_after_job()
        await game.keeper.prints("ready")

        assert game.kinds() == [
            ReportKind.READY,
            ReportKind.STOPPED_BY_NODE,
            ReportKind.STARTED_BY_NODE,
            ReportKind.READY,
        ]
        assert len(game.keepers.spawned) == 2

    run(test, tmp_path)


def test_a_game_that_crashed_during_a_job_is_not_started_after_it(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await crash_while_running(game)
        await game.ended()

        await game.supervisor.start_after_job()

        assert game.state == ServerState.STOPPED
        assert len(game.keepers.spawned) == 1

    run(test, tmp_path)


# A new agent reattaching to the keepers an earlier one left (resume) -----------------------


@pytest.mark.parametrize(
    "state",
    [ServerState.STARTING, ServerState.RUNNING, ServerState.STOPPING, ServerState.RESTARTING],
)
def test_a_new_agent_finds_the_game_in_the_state_the_earlier_one_left(
    tmp_path: Path, state: ServerState
) -> None:
    async def test(game: Game) -> None:
        await game.in_state(state)

        supervisor = await game.agent_again()

        assert supervisor.state == state
        assert supervisor.pid == game.keeper.pid

    run(test, tmp_path)


def test_a_new_agent_finds_a_game_that_ended_stopped_and_numbers_its_lines_on(
    tmp_path: Path,
) -> None:
    async def test(game: Game) -> None:
        await game.running()
        await game.keeper.prints("one", "two")
        game.keeper.exits(exit_code=0)
        await game.ended()
        attached = len(game.keepers.spawned)

        supervisor = await game.agent_again()

        assert supervisor.state == ServerState.STOPPED
        assert supervisor.last_n == 3  # "ready", "one", "two"
        assert len(game.keepers.spawned) == attached

    run(test, tmp_path)


def test_a_game_that_runs_on_under_a_new_agent_reports_its_crash_to_it(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.running()
        supervisor = await game.agent_again()

        game.keeper.exits(exit_code=1)
        await asyncio.wait_for(supervisor.ended.wait(), WAIT_SECONDS)

        assert supervisor.state == ServerState.STOPPED
        assert game.kinds() == [ReportKind.READY, ReportKind.CRASHED]

    run(test, tmp_path)


def test_a_stop_under_way_when_the_agent_went_ends_as_halted(tmp_path: Path) -> None:
    async def test(game: Game) -> None:
        await game.stopping()
        supervisor = await game.agent_again()

        game.keeper.exits(exit_code=0)
        await asyncio.wait_for(supervisor.ended.wait(), WAIT_SECONDS)

        assert game.kinds() == [ReportKind.READY, ReportKind.HALTED]

    run(test, tmp_path)
