"""The keeper: one small process per game server, in the manner of conmon.

`python -m gshost_agent.keeper <run dir>` reads `spec.json` there, starts the game (as its
server's user, in a session of its own, with the memory limit), holds its pipes, appends its
output to a bounded console log, answers the agent on a Unix socket, and records how the game
ended in `exit.json` before it exits itself. The agent starts keepers detached, so it can stop, be
upgraded or die and come back while the games go on.

Socket protocol (`keeper.sock`): the client sends one JSON object on one line:
- `{"op": "status"}` -> `{"pid", "started_at", "last": N}`;
- `{"op": "write", "text": "..."}` -> `{"ok": true}`: the text and a newline on the game's stdin;
- `{"op": "signal", "signal": 9}` -> `{"ok": true}`: the signal to the game's process group;
- `{"op": "follow", "after": N}` -> one `{"n", "text"}` object a line for every console line
  after N that the keeper still holds, then each new line as it comes (in batches: several
  lines a write), then `{"exit": {...}}` (the exit record) when the game has exited. A line of
  the keeper's own, not the game's, has `"daemon": true`: the `output throttled` notice when
  the game prints more than 2,000 lines a second and the rest of that second's are dropped
  (console_output.py).

Standard library only, and small: 50 of these run on one node.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # The keeper speaks no TLS: asyncio without ssl costs about 5 MB less per keeper.
    sys.modules.setdefault("ssl", None)  # type: ignore[arg-type]

import asyncio
import collections
import contextlib
import errno
import gc
import json
import os
import resource
import signal
import socket
import subprocess
import time
import traceback
from pathlib import Path
from typing import Any

from gshost_agent.console_output import (
    LINE_LIMIT,
    ConsoleLog,
    Follower,
    Line,
    LineBatcher,
    LineLimiter,
    OutputLines,
    encoded_lines,
)
from gshost_agent.protocol import format_time, last_output

SPEC = "spec.json"
GAME = "game.json"
EXIT = "exit.json"
SOCKET = "keeper.sock"
CONSOLE_LOG = "console.log"
CONSOLE_LOG_LIMIT = 512 * 1024  # then it moves to console.log.1: two files at most
HELD_LINES = 500
READ_CHUNK = 64 * 1024  # a pipe's whole buffer in one read
DRAIN_SECONDS = 2.0
SANDBOX_IGNORED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


# All that root's helpers of a sandboxed game (nsenter, setpriv) run with.
HELPER_ENVIRONMENT = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
RESERVE = "reserve"  # <data>/reserve: room kept for the agent's own state (layout.py)


def write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    """Written whole or not at all, and durable once renamed: an exit must not be lost. On a
    full disk (a game filled it), the agent's reserve is given up for it."""
    try:
        _write_json(path, data)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT) or not _release_reserve(path):
            raise
        _write_json(path, data)


def _release_reserve(path: Path) -> bool:
    for directory in path.parents[:3]:  # <data>/outbox/x, <data>/run/<id>/x
        with contextlib.suppress(FileNotFoundError):
            (directory / RESERVE).unlink()
            print(f"the disk is full: released {directory / RESERVE}", file=sys.stderr)
            return True
    return False


def _write_json(path: Path, data: dict[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(data, file)
            file.flush()
            os.fsync(file.fileno())
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class Groups:
    """The game's cgroups, made fresh for each start so the OOM counter says something about
    this run only: memory (v1 or v2), and where the spec names them the pids and cpu
    controllers (v1: one hierarchy each; v2: all in the memory group's). Empty `memory`: no
    cgroup, RLIMIT_AS instead."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.version = int(spec.get("cgroup_version", 1))
        memory = spec.get("cgroup", "")
        self.path = Path(memory) if memory else None
        self.limit_bytes = int(spec["memory_mb"]) << 20
        self.processes = spec.get("processes")
        self.cpu_percent = spec.get("cpu_percent")
        self.others = [Path(p) for p in (spec.get("cgroup_pids"), spec.get("cgroup_cpu")) if p]
        self.cpu = Path(spec["cgroup_cpu"]) if spec.get("cgroup_cpu") else None
        self.keeper_inside = False

    def paths(self) -> list[Path]:
        return [self.path, *self.others] if self.path is not None else []

    def create(self) -> None:
        if self.path is None:
            return
        for path in self.paths():
            with contextlib.suppress(OSError):
                path.rmdir()
        try:
            for path in self.paths():
                path.mkdir(parents=True, exist_ok=True)
            self._limit()
        except OSError as error:
            # The memory limit still holds, as an address-space limit: better than no game.
            print(f"no cgroup ({error}): RLIMIT_AS instead", file=sys.stderr)
            self.remove()
            self.path = None

    def _limit(self) -> None:
        assert self.path is not None
        period = 100_000
        quota = None if self.cpu_percent is None else max(1000, int(self.cpu_percent) * 1000)
        if self.version == 2:
            (self.path / "memory.max").write_text(str(self.limit_bytes))
            with contextlib.suppress(OSError):
                (self.path / "memory.swap.max").write_text("0")
            if self.processes is not None:
                (self.path / "pids.max").write_text(str(self.processes))
            if quota is not None:
                (self.path / "cpu.max").write_text(f"{quota} {period}")
            return
        (self.path / "memory.limit_in_bytes").write_text(str(self.limit_bytes))
        with contextlib.suppress(OSError):  # no swap beyond the limit, where the node has swap
            (self.path / "memory.memsw.limit_in_bytes").write_text(str(self.limit_bytes))
        for path in self.others:
            if self.processes is not None and (path / "pids.max").exists():
                (path / "pids.max").write_text(str(self.processes))
            if quota is not None and (path / "cpu.cfs_quota_us").exists():
                (path / "cpu.cfs_period_us").write_text(str(period))
                (path / "cpu.cfs_quota_us").write_text(str(quota))

    def enter(self) -> None:
        """In the game's process, before it drops root and runs the game."""
        if self.path is None:
            resource.setrlimit(resource.RLIMIT_AS, (self.limit_bytes, self.limit_bytes))
            return
        for path in self.paths():
            (path / "cgroup.procs").write_text(str(os.getpid()))

    def take_in_keeper(self) -> None:
        """The keeper joins its game's cpu cgroup (v1, where it has one of its own): reading
        the game's output, however much it prints, is then paid from the game's own share.
        Only cpu: its memory and processes stay the node's."""
        if self.path is None or self.cpu is None or self.keeper_inside:
            return
        try:
            (self.cpu / "cgroup.procs").write_text(str(os.getpid()))
        except OSError as error:
            print(f"the keeper stays outside its game's cpu cgroup: {error}", file=sys.stderr)
            self.cpu = None  # not tried again
            return
        self.keeper_inside = True

    def _let_keeper_out(self) -> None:
        if self.keeper_inside and self.cpu is not None:
            with contextlib.suppress(OSError):
                (self.cpu.parent / "cgroup.procs").write_text(str(os.getpid()))
            self.keeper_inside = False

    def killed_for_memory(self, signal_number: int | None) -> bool:
        if self.path is None:
            return False
        events = "memory.events" if self.version == 2 else "memory.oom_control"
        with contextlib.suppress(OSError, ValueError):
            for line in (self.path / events).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
            # An older kernel without the counter: a SIGKILL with the memory at its limit.
            peak = int((self.path / "memory.max_usage_in_bytes").read_text())
            return signal_number == signal.SIGKILL and peak >= self.limit_bytes - (1 << 20)
        return False

    def kill_all(self) -> None:
        """Whatever the game left in its cgroups, even what escaped its process group."""
        for path in self.paths():
            with contextlib.suppress(OSError, ValueError):
                for pid in (path / "cgroup.procs").read_text().split():
                    if int(pid) == os.getpid():
                        continue  # the keeper itself, in the game's cpu cgroup
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> None:
        # The killed take a moment to leave the group; the keeper has nothing else to do.
        self._let_keeper_out()
        for path in self.paths():
            for _ in range(20):
                if not path.exists():
                    break
                with contextlib.suppress(OSError):
                    path.rmdir()
                    break
                self.kill_all()
                time.sleep(0.05)


class GameProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Says when the game has exited. (Process.wait() also waits for its pipes to close, and a
    process the game left behind may hold them open.)"""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


class Keeper:
    def __init__(self, run_dir: Path, spec: dict[str, Any]) -> None:
        self.run_dir = run_dir
        self.spec = spec
        self.memory = Groups(spec)
        self.sandboxed = bool(spec.get("sandboxed"))
        self.lines: collections.deque[tuple[int, Line]] = collections.deque(maxlen=HELD_LINES)
        self.last = 0
        self.followers: set[Follower] = set()
        self.process: asyncio.subprocess.Process | None = None
        self.protocol: GameProtocol | None = None
        self.started_at = ""
        self.following: set[asyncio.Task[None]] = set()
        self.log = ConsoleLog(run_dir / CONSOLE_LOG, CONSOLE_LOG_LIMIT)
        self.batcher = LineBatcher(self.publish)

    async def run(self) -> int:
        try:
            await self.start_game()
        except (OSError, subprocess.SubprocessError) as error:  # not even started: an exit
            self.publish([Line(f"gshost-agent: cannot start the game: {error}")])
            write_json_atomically(self.run_dir / EXIT, self.exit_record(127))
            self.memory.remove()
            return 1
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.signal_game, signal.SIGKILL)
        server = await asyncio.start_unix_server(self.on_client, path=self.run_dir / SOCKET)
        os.chmod(self.run_dir / SOCKET, 0o600)
        await self.read_output()
        self.batcher.flush()  # every line on disk and sent before the exit is
        assert self.process is not None
        assert self.process.returncode is not None
        record = self.exit_record(self.process.returncode)
        write_json_atomically(self.run_dir / EXIT, record)
        server.close()
        with contextlib.suppress(OSError):
            (self.run_dir / SOCKET).unlink()
        for follower in self.followers:
            follower.put(json.dumps({"exit": record}).encode() + b"\n")
            follower.queue.put_nowait(None)
        if self.following:  # lets the followers' writers send the exit
            await asyncio.wait(self.following, timeout=DRAIN_SECONDS)
        self.memory.remove()
        return 0

    async def start_game(self) -> None:
        self.memory.create()
        loop = asyncio.get_running_loop()
        argv, cwd, env, passed = self.exec_plan()
        try:
            transport, self.protocol = await loop.subprocess_exec(
                lambda: GameProtocol(limit=READ_CHUNK, loop=loop),
                *argv,
                cwd=cwd,
                env=env,
                pass_fds=passed,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=self.become_the_game,  # the keeper has no thread yet: safe
            )
        finally:
            for descriptor in passed:
                os.close(descriptor)
        self.process = asyncio.subprocess.Process(transport, self.protocol, loop)
        self.started_at = format_time()
        write_json_atomically(
            self.run_dir / GAME,
            {"pid": self.process.pid, "keeper_pid": os.getpid(), "started_at": self.started_at},
        )

    def exec_plan(self) -> tuple[list[str], str, dict[str, str], tuple[int, ...]]:
        """What the keeper runs, from where, with which environment and descriptors. A sandboxed
        game's command starts with root's helpers (nsenter, setpriv): they run from `/` with a
        fixed environment, never the game's directory or the template's environment (a
        library the game planted would load as root); bubblewrap gives the game its own."""
        argv = list(self.spec["argv"])
        if not self.sandboxed:
            return argv, self.spec["cwd"], dict(self.spec["env"]), ()
        seccomp = self.spec["seccomp"]  # the node's filter, and where its descriptor goes
        descriptor = os.open(seccomp["path"], os.O_RDONLY | os.O_CLOEXEC)
        argv[int(seccomp["argument"])] = str(descriptor)
        return argv, "/", dict(HELPER_ENVIRONMENT), (descriptor,)

    def become_the_game(self) -> None:
        # What the keeper ignores (a terminal's signals) would stay ignored in the game.
        self.memory.enter()
        if self.sandboxed:
            # bubblewrap's monitor must outlive a stop signal (the game's to handle, and its
            # end ends the sandbox): ignored here, set back to default in the sandbox (`env
            # --default-signal`). Root is dropped before bubblewrap (`setpriv`).
            for number in SANDBOX_IGNORED_SIGNALS:
                signal.signal(number, signal.SIG_IGN)
            return
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        gid, uid = self.spec.get("gid"), self.spec.get("uid")
        if gid is not None:
            os.setgroups([gid])
            os.setgid(gid)
        if uid is not None:
            os.setuid(uid)

    async def read_output(self) -> None:
        """Until the game has exited and its output is drained. A process the game left behind
        may hold the pipe open: the game's exit, not the pipe's end, says when it is over."""
        assert self.process is not None and self.process.stdout is not None
        assert self.protocol is not None
        reading = asyncio.ensure_future(self.read_console(self.process.stdout))
        await self.protocol.exited.wait()
        # Whatever it left in its process group, or its cgroup, goes with it.
        self.signal_game(signal.SIGKILL)
        self.memory.kill_all()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(reading), DRAIN_SECONDS)
        reading.cancel()

    async def read_console(self, stdout: asyncio.StreamReader) -> None:
        """The game's output in chunks as large as the pipe holds, as lines within the limit
        (console_output.py), handed on in batches. Once the game floods its console, the
        keeper reads it within the game's cpu share, for the rest of the run."""
        output = OutputLines(LineLimiter(), LINE_LIMIT)
        while chunk := await stdout.read(READ_CHUNK):
            self.batcher.add(output.feed(chunk, time.monotonic()))
            if output.flooded:
                self.memory.take_in_keeper()
        self.batcher.add(output.end(time.monotonic()))

    def publish(self, batch: list[Line]) -> None:
        """Lines numbered, held, logged and sent to every follower: one write each."""
        numbered = []
        for line in batch:
            self.last += 1
            numbered.append((self.last, line))
        self.lines.extend(numbered)
        self.log.write([line.text for line in batch])
        encoded = encoded_lines(numbered)
        for follower in list(self.followers):
            if follower.stalled():
                self.followers.discard(follower)  # a reader that stalls is dropped, not waited
                follower.queue.put_nowait(None)
            else:
                follower.put(encoded, len(numbered))

    def signal_game(self, number: int) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, number)

    def exit_record(self, returncode: int) -> dict[str, Any]:
        if self.sandboxed and 128 < returncode <= 128 + 64:
            returncode = 128 - returncode  # bubblewrap says the game's signal as 128 + N
        signal_number = -returncode if returncode < 0 else None
        return {
            "pid": self.process.pid if self.process is not None else None,
            "started_at": self.started_at,
            "at": format_time(),
            "exit_code": returncode if returncode >= 0 else None,
            "signal": signal_number,
            "oom": self.memory.killed_for_memory(signal_number),
            "lines": self.last,  # how many console lines this run had
            "last_output": last_output([line.text for _, line in self.lines]),
        }

    async def on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        try:
            request = json.loads(await reader.readline())
            if request.get("op") == "follow" and task is not None:
                self.following.add(task)
                await self.follow(int(request.get("after", 0)), writer)
            else:
                writer.write(json.dumps(await self.answer(request)).encode() + b"\n")
                await writer.drain()
        except (ValueError, TypeError, AttributeError, KeyError, ConnectionError):
            pass
        finally:
            self.following.discard(task)
            writer.close()

    async def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process is not None
        operation = request.get("op")
        if operation == "status":
            return {"pid": self.process.pid, "started_at": self.started_at, "last": self.last}
        if operation == "signal":
            self.signal_game(int(request["signal"]))
            return {"ok": True}
        if operation == "write" and self.process.stdin is not None:
            try:
                self.process.stdin.write(str(request["text"]).encode() + b"\n")
                await self.process.stdin.drain()
            except (ConnectionError, RuntimeError):
                return {"ok": False, "error": "the game's console is closed"}
            return {"ok": True}
        return {"ok": False, "error": "unknown operation"}

    async def follow(self, after: int, writer: asyncio.StreamWriter) -> None:
        follower = Follower()
        held = [(n, line) for n, line in self.lines if n > after]
        if held:
            follower.put(encoded_lines(held), len(held))
        self.followers.add(follower)
        try:
            while (item := await follower.queue.get()) is not None:
                batch, lines = item
                writer.write(batch)
                await writer.drain()
                follower.waiting -= lines
        finally:
            self.followers.discard(follower)


def keep(run_dir: Path) -> int:
    spec = json.loads((run_dir / SPEC).read_text())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is not for the keeper
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return asyncio.run(Keeper(run_dir, spec).run())


# The zygote ------------------------------------------------------------------------------------
#
# One process per agent data directory (`python -m gshost_agent.keeper <data>/run/zygote
# --zygote`), with this module loaded, that forks a keeper for each game on request: a keeper is
# then only the pages it writes, the interpreter's are shared with the zygote and every other
# keeper. Like the keepers, it outlives the agent; the next agent uses it again.
#
# Socket protocol (`zygote.sock`, 0600 in its 0700 directory): one JSON line,
# `{"run_dir": "<data>/run/<server id>"}` -> `{"pid": N}` (the new keeper, in a session of its
# own, its output in `keeper.log` there), or `{"op": "exit"}` -> the zygote ends.

ZYGOTE_SOCKET = "zygote.sock"


def zygote(directory: Path) -> int:
    directory.mkdir(mode=0o700, exist_ok=True)
    path, temporary = directory / ZYGOTE_SOCKET, directory / f".z{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(temporary))
    os.chmod(temporary, 0o600)
    listener.listen(64)
    os.replace(temporary, path)  # there once it answers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # its keepers are reaped by the kernel
    asyncio.new_event_loop().close()  # what an event loop loads lazily, loaded here once
    gc.collect()
    gc.freeze()  # the collector leaves the shared pages alone in the keepers
    while True:
        connection, _ = listener.accept()
        with connection:
            try:
                request = json.loads(connection.makefile("rb").readline())
                if request.get("op") == "exit":
                    return 0
                run_dir = Path(str(request["run_dir"]))
            except (ValueError, KeyError, TypeError, AttributeError, OSError):
                continue
            if run_dir.parent != directory.parent or not (run_dir / SPEC).is_file():
                continue  # only its own agent's run directories
            pid = os.fork()
            if pid == 0:  # the keeper
                listener.close()
                connection.close()
                os._exit(_forked_keeper(run_dir))
            with contextlib.suppress(OSError):
                connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")


def _forked_keeper(run_dir: Path) -> int:
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        os.chdir(run_dir)
        log = os.open(run_dir / "keeper.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        return keep(run_dir)
    except BaseException:  # nothing of the zygote's may run on in its child
        with contextlib.suppress(BaseException):
            traceback.print_exc()
            sys.stderr.flush()
        return 1


def main() -> int:
    if sys.argv[2:] == ["--zygote"]:
        return zygote(Path(sys.argv[1]))
    return keep(Path(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
