"""The demo game, run as a real process with real TCP clients."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gshost_agent import demo_game
from tests.agent.lines import LineReader
from tests.ports import free_port


@dataclass
class RunningGame:
    process: subprocess.Popen[str]
    output: LineReader
    port: int
    workdir: Path

    def command(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()


def start_game(workdir: Path, properties: str = "") -> RunningGame:
    if properties:
        (workdir / "server.properties").write_text(properties)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, demo_game.__file__, "--port", str(port)],
        cwd=workdir,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    game = RunningGame(process, LineReader(process.stdout), port, workdir)
    game.output.wait_for(rf"^ready on port {port}$")
    return game


@pytest.fixture
def games(tmp_path: Path) -> Iterator[list[RunningGame]]:
    started: list[RunningGame] = []
    yield started
    for game in started:
        if game.process.poll() is None:
            game.process.kill()
        game.process.wait(timeout=10)


@pytest.fixture
def game(games: list[RunningGame], tmp_path: Path) -> RunningGame:
    games.append(start_game(tmp_path))
    return games[-1]


def join(port: int, name: str) -> tuple[socket.socket, str]:
    client = socket.create_connection(("127.0.0.1", port), timeout=10)
    client.sendall(f"JOIN {name}\n".encode())
    return client, client.makefile().readline().strip()


def test_it_prints_ready_and_writes_the_world_at_start(game):
    world = json.loads((game.workdir / "world.dat").read_text())
    assert world == {"ticks": 0, "names_ever": []}


def test_it_welcomes_a_player_who_joins(game):
    client, answer = join(game.port, "alice")
    with client:
        assert answer == "WELCOME alice"
        game.output.wait_for("^alice joined$")


def test_it_lists_no_players_when_empty(game):
    game.command("list")
    game.output.wait_for("^players 0:$")


def test_it_lists_the_players_who_joined(game):
    alice, _ = join(game.port, "alice")
    bob, _ = join(game.port, "bob")
    with alice, bob:
        game.output.wait_for("^bob joined$")
        game.command("list")
        game.output.wait_for("^players 2: alice, bob$")


def test_it_forgets_a_player_who_closes_the_connection(game):
    alice, _ = join(game.port, "alice")
    alice.close()
    game.output.wait_for("^alice left$")
    game.command("list")
    game.output.wait_for("^players 0:$")


def test_it_forgets_a_player_who_sends_quit(game):
    alice, _ = join(game.port, "alice")
    with alice:
        alice.sendall(b"QUIT\n")
        game.output.wait_for("^alice left$")


def test_it_refuses_a_player_beyond_max_players(games, tmp_path):
    game = start_game(tmp_path, "motd=Hi\nmax-players=1\n")
    games.append(game)
    alice, _ = join(game.port, "alice")
    bob, answer = join(game.port, "bob")
    with alice, bob:
        assert answer.startswith("FULL")
        game.command("list")
        game.output.wait_for("^players 1: alice$")


def test_it_says_a_line_on_the_console_and_to_every_client(game):
    alice, _ = join(game.port, "alice")
    with alice:
        reader = alice.makefile()
        game.command("say hello there")
        game.output.wait_for(r"^\[say\] hello there$")
        assert reader.readline().strip() == "[say] hello there"


def test_it_saves_the_names_that_ever_joined(game):
    alice, _ = join(game.port, "alice")
    alice.close()
    game.output.wait_for("^alice left$")
    game.command("save")
    game.output.wait_for("^saved$")
    assert json.loads((game.workdir / "world.dat").read_text())["names_ever"] == ["alice"]


def test_it_saves_and_exits_0_on_stop(game):
    game.command("stop")
    game.output.wait_for("^saved$")
    game.output.wait_for("^stopping$")
    assert game.process.wait(timeout=10) == 0


def test_it_treats_sigterm_like_stop(game):
    game.process.send_signal(signal.SIGTERM)
    game.output.wait_for("^stopping$")
    assert game.process.wait(timeout=10) == 0


def test_gshost_play_joins_the_game_without_nc(game):
    played = subprocess.run(
        [sys.executable, "-m", "gshost_agent.play", "127.0.0.1", str(game.port)],
        input="JOIN alice\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert played.returncode == 0, played.stderr
    assert played.stdout.splitlines()[0] == "WELCOME alice"


def test_gshost_play_says_when_the_game_cannot_be_reached():
    played = subprocess.run(
        [sys.executable, "-m", "gshost_agent.play", "127.0.0.1", str(free_port())],
        input="",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert played.returncode == 1
    assert "cannot reach 127.0.0.1:" in played.stderr
