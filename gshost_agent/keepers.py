"""The agent's side of a keeper (gshost_agent/keeper.py): starting one, detached, and talking
to it over its Unix socket. A keeper outlives the agent; the agent finds it again by its run
directory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from gshost_agent import keeper

PACKAGE_PARENT = Path(__file__).resolve().parent.parent
SPAWN_TIMEOUT_SECONDS = 10.0
_POLL_SECONDS = 0.02
FOLLOW_CHUNK = 256 * 1024


class KeeperGone(ConnectionError):
    """The keeper does not answer: the game it kept has ended (see `exit_record`)."""


def _keeper_environment() -> dict[str, str]:
    # Only what it needs to find its module: never the agent's token.
    return {"PYTHONPATH": str(PACKAGE_PARENT), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


class Zygote:
    """The agent's side of the keepers' zygote (keeper.zygote): started when there is none,
    asked for a keeper per game. One for a data directory; it outlives the agent."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.socket = directory / keeper.ZYGOTE_SOCKET
        self._lock = asyncio.Lock()

    async def fork(self, run_dir: Path) -> int:
        """A new keeper's pid, for the spec written in `run_dir`."""
        async with self._lock:
            try:
                return await self._ask({"run_dir": str(run_dir)})
            except (OSError, ValueError, KeyError, TimeoutError):
                await self._start()  # none yet, or it was killed
                return await self._ask({"run_dir": str(run_dir)})

    async def close(self) -> None:
        """The zygote ends (its keepers do not: they are on their own)."""
        with contextlib.suppress(OSError, ValueError, KeyError, TimeoutError):
            await self._ask({"op": "exit"})

    async def _ask(self, request: dict[str, Any]) -> int:
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(self.socket), SPAWN_TIMEOUT_SECONDS
        )
        try:
            writer.write(json.dumps(request).encode() + b"\n")
            line = await asyncio.wait_for(reader.readline(), SPAWN_TIMEOUT_SECONDS)
        finally:
            writer.close()
        if request.get("op") == "exit":
            return 0
        return int(json.loads(line)["pid"])

    async def _start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        self.directory.mkdir(mode=0o700, exist_ok=True)
        with open(self.directory / "zygote.log", "ab") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gshost_agent.keeper",
                str(self.directory),
                "--zygote",
                env=_keeper_environment(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                cwd=self.directory,
            )
        asyncio.get_running_loop().create_task(process.wait())
        deadline = time.monotonic() + SPAWN_TIMEOUT_SECONDS
        while not self.socket.exists() and process.returncode is None:
            if time.monotonic() > deadline:
                raise OSError("the keepers' zygote did not start")
            await asyncio.sleep(_POLL_SECONDS)


class KeeperHandle:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.socket = run_dir / keeper.SOCKET
        self._process: asyncio.subprocess.Process | None = None
        self._pid: int | None = None

    @classmethod
    async def spawn(
        cls, run_dir: Path, spec: dict[str, Any], zygote: Zygote | None = None
    ) -> KeeperHandle:
        """A new keeper for `spec` (forked by `zygote`, else a process of its own), once it has
        started the game (or failed to)."""
        handle = cls(run_dir)
        for stale in (keeper.GAME, keeper.EXIT, keeper.SOCKET, keeper.CONSOLE_LOG):
            with contextlib.suppress(FileNotFoundError):
                (run_dir / stale).unlink()
        keeper.write_json_atomically(run_dir / keeper.SPEC, spec)
        if zygote is not None:
            handle._pid = await zygote.fork(run_dir)
            await handle._wait_for_the_game()
            return handle
        with open(run_dir / "keeper.log", "ab") as log:
            handle._process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gshost_agent.keeper",
                str(run_dir),
                env=_keeper_environment(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # a terminal's Ctrl-C or the agent's end do not reach it
                cwd=run_dir,
            )
        # Reaped when it ends, so no zombie is left while the agent runs.
        asyncio.get_running_loop().create_task(handle._process.wait())
        await handle._wait_for_the_game()
        return handle

    async def _wait_for_the_game(self) -> None:
        # The keeper says so through files: another process's progress, polled briefly.
        deadline = time.monotonic() + SPAWN_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if (self.run_dir / keeper.EXIT).exists() or self.socket.exists():
                return
            if self._process is not None and self._process.returncode is not None:
                return
            if self._pid is not None and not _alive(self._pid):
                return
            await asyncio.sleep(_POLL_SECONDS)

    def game(self) -> dict[str, Any] | None:
        return _read_json(self.run_dir / keeper.GAME)

    def exit_record(self) -> dict[str, Any] | None:
        return _read_json(self.run_dir / keeper.EXIT)

    def keeper_alive(self) -> bool:
        game = self.game()
        if game is None:
            return False
        try:
            os.kill(int(game["keeper_pid"]), 0)
        except (ProcessLookupError, PermissionError, KeyError, ValueError):
            return False
        return self.socket.exists()

    async def request(self, request: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(self.socket), timeout
            )
        except (TimeoutError, OSError) as error:
            raise KeeperGone(str(error)) from error
        try:
            writer.write(json.dumps(request).encode() + b"\n")
            line = await asyncio.wait_for(reader.readline(), timeout)
        except (TimeoutError, OSError) as error:
            raise KeeperGone(str(error)) from error
        finally:
            writer.close()
        if not line:
            raise KeeperGone("the keeper closed the connection")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def follow(self, after: int) -> AsyncIterator[dict[str, Any]]:
        """Console lines after `after` as they come, then `{"exit": ...}` (or just the end,
        when the keeper went away without a word)."""
        try:
            reader, writer = await asyncio.open_unix_connection(self.socket, limit=FOLLOW_CHUNK)
        except OSError:
            return
        try:
            writer.write(json.dumps({"op": "follow", "after": after}).encode() + b"\n")
            partial = b""
            # Whatever has come, in one read: the keeper sends its lines in batches.
            while chunk := await reader.read(FOLLOW_CHUNK):
                *lines, partial = (partial + chunk).split(b"\n")
                for line in lines:
                    yield json.loads(line)
        except (OSError, ValueError):
            return
        finally:
            writer.close()

    def console_log_tail(self, count: int) -> list[str]:
        """The last lines of the console log (for a game that ended while the agent was away)."""
        try:
            with open(self.run_dir / keeper.CONSOLE_LOG, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 64 * 1024))
                data = log.read()
        except OSError:
            return []
        return data.decode("utf-8", errors="replace").splitlines()[-count:]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
