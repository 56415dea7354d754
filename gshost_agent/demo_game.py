"""The demo game (`gshost-demo-game`): a small TCP game server shipped with the agent.

Standard library only and self-contained, so the agent can copy this one file where the game's
unprivileged user can read it and run it with any Python 3.11.

- settings: `server.properties` (`key=value` lines: motd, max-players, difficulty) in the
  working directory, read once at start;
- players: a client sends `JOIN <name>` and gets `WELCOME <name>`; it leaves by closing the
  connection or sending `QUIT`;
- console (stdin, one command a line): `list`, `say <text>`, `save`, `stop`;
- the world (`world.dat`): a tick counter and the names that ever joined.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # The game speaks no TLS: asyncio without ssl costs about 5 MB less per game.
    sys.modules.setdefault("ssl", None)  # type: ignore[arg-type]

import argparse
import asyncio
import contextlib
import json
import os
import signal
import threading
from pathlib import Path

SETTINGS_FILE = "server.properties"
WORLD_FILE = "world.dat"
DEFAULT_MAX_PLAYERS = 20
TICK_SECONDS = 1.0
NAME_LIMIT = 32
JOIN_SECONDS = 30  # a connection that never says JOIN does not hold a slot for ever


def say(line: str) -> None:
    # One line at a time, flushed: the agent reads this output through a pipe.
    print(line, flush=True)


def read_settings(path: Path) -> dict[str, str]:
    settings: dict[str, str] = {}
    if not path.is_file():
        return settings
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        settings[key.strip()] = value.strip()
    return settings


def max_players_from(settings: dict[str, str]) -> int:
    try:
        value = int(settings.get("max-players", DEFAULT_MAX_PLAYERS))
    except ValueError:
        return DEFAULT_MAX_PLAYERS
    return value if value > 0 else DEFAULT_MAX_PLAYERS


class World:
    """What `world.dat` holds. Written whole to a temporary file, then renamed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ticks = 0
        self.names_ever: list[str] = []
        if path.is_file():
            with contextlib.suppress(ValueError, OSError):
                data = json.loads(path.read_text(encoding="utf-8"))
                self.ticks = int(data.get("ticks", 0))
                self.names_ever = [str(name) for name in data.get("names_ever", [])]

    def remember(self, name: str) -> None:
        if name not in self.names_ever:
            self.names_ever.append(name)

    def save(self) -> None:
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(
            json.dumps({"ticks": self.ticks, "names_ever": self.names_ever}) + "\n",
            encoding="utf-8",
        )
        os.replace(temporary, self.path)


class Game:
    def __init__(self, *, port: int, settings: dict[str, str], world: World) -> None:
        self.port = port
        self.motd = settings.get("motd", "")
        self.difficulty = settings.get("difficulty", "normal")
        self.max_players = max_players_from(settings)
        self.world = world
        self.players: dict[str, asyncio.StreamWriter] = {}
        self.finished = asyncio.Event()
        self.exit_code = 0

    async def serve(self) -> int:
        server = await asyncio.start_server(self.on_client, host=None, port=self.port)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.stop)
        self.read_console_in_background(loop)
        ticking = asyncio.create_task(self.tick())
        say(f"ready on port {self.port}")
        await self.finished.wait()
        ticking.cancel()
        server.close()
        for writer in list(self.players.values()):
            writer.close()
        return self.exit_code

    async def tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            self.world.ticks += 1

    def read_console_in_background(self, loop: asyncio.AbstractEventLoop) -> None:
        # A thread, because a blocking read of stdin works whatever stdin is (pipe, tty, file).
        def read() -> None:
            for line in sys.stdin:
                loop.call_soon_threadsafe(self.on_command, line.rstrip("\r\n"))

        threading.Thread(target=read, daemon=True, name="console").start()

    def on_command(self, line: str) -> None:
        command, _, argument = line.strip().partition(" ")
        if command == "list":
            say(f"players {len(self.players)}: {', '.join(self.players)}".rstrip())
        elif command == "say":
            say(f"[say] {argument}")
            self.broadcast(f"[say] {argument}")
        elif command == "save":
            self.save()
        elif command == "stop":
            self.stop()
        elif command:
            say(f"unknown command: {command}")

    def save(self) -> None:
        self.world.save()
        say("saved")

    def stop(self) -> None:
        if self.finished.is_set():
            return
        self.save()
        say("stopping")
        self.finished.set()

    def broadcast(self, line: str) -> None:
        for writer in self.players.values():
            with contextlib.suppress(ConnectionError, RuntimeError):
                writer.write(f"{line}\n".encode())

    async def on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        name = ""
        try:
            name = await self.admit(reader, writer)
            if name:
                await self.play(reader)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError, TimeoutError):
            pass
        finally:
            if name and self.players.get(name) is writer:
                del self.players[name]
                say(f"{name} left")
            writer.close()

    async def admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
        """The joined player's name, or "" when the client was turned away."""
        raw = await asyncio.wait_for(reader.readline(), JOIN_SECONDS)
        line = raw.decode("utf-8", errors="replace").strip()
        verb, _, name = line.partition(" ")
        name = name.strip()
        if verb != "JOIN" or not valid_name(name):
            writer.write(b"ERROR expected JOIN <name>\n")
        elif name in self.players:
            writer.write(f"ERROR {name} is already playing\n".encode())
        elif len(self.players) >= self.max_players:
            writer.write(f"FULL the server is full ({self.max_players} players)\n".encode())
        else:
            self.players[name] = writer
            self.world.remember(name)
            writer.write(f"WELCOME {name}\n".encode())
            if self.motd:
                writer.write(f"MOTD {self.motd}\n".encode())
            await writer.drain()
            say(f"{name} joined")
            return name
        await writer.drain()
        return ""

    async def play(self, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            if line.strip() == b"QUIT":
                return


def valid_name(name: str) -> bool:
    # No space or comma: names are listed as `a, b`.
    return 0 < len(name) <= NAME_LIMIT and name.isprintable() and not {" ", ","} & set(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gshost-demo-game", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    arguments = parser.parse_args(argv)
    workdir = Path.cwd()
    world = World(workdir / WORLD_FILE)
    if not world.path.exists():
        world.save()
    game = Game(port=arguments.port, settings=read_settings(workdir / SETTINGS_FILE), world=world)
    return asyncio.run(game.serve())


if __name__ == "__main__":
    sys.exit(main())
