"""The freeciv template read against freeciv-server 3.0's own console text (as it printed it),
without a process: its list answer in rows, its join and leave lines, its settings file."""

from __future__ import annotations

import re

from gshost_agent.players import PlayerRoster
from gshost_agent.settings_files import parse, render, settings_for
from gshost_agent.templates import PlayersSpec, load_template

RULE = "-" * 78
LIST_OF_THREE = [
    "> list",
    "List of players:",
    RULE,
    "Alice [#ff0000]: Team 1, user Unassigned",
    "  AI, classic, difficulty level Easy",
    "Dan Eve [#ffff00]: Team 2, user Unassigned",
    "  Human",
    "Bob [#00ffff]: Team 3, user Bob, not ready",
    "  Human, 1 connection:",
    "    Bob from localhost (command access level basic), bufsize=104kb",
    RULE,
]
LIST_OF_NONE = ["> list", "List of players:", RULE, "<no players>", RULE]


def roster(lines: list[str], start: PlayerRoster | None = None) -> PlayerRoster:
    players = start or PlayerRoster(load_template("freeciv").players)
    for line in lines:
        players.on_line(line)
    return players


def test_its_ready_pattern_is_the_line_freeciv_prints_when_it_accepts_connections():
    pattern = re.compile(load_template("freeciv").ready_pattern)
    assert pattern.search("2: Now accepting new client connections on port 27000.")
    assert not pattern.search("2: Loading rulesets.")


def test_it_reads_the_players_of_a_list_answer_in_rows():
    players = roster(LIST_OF_THREE)
    assert players.answered.is_set()
    assert list(players.players) == ["Alice", "Dan Eve", "Bob"]


def test_it_reads_an_empty_list_answer_as_no_players():
    players = roster(["Alice has been added as an AI-controlled player (classic).", *LIST_OF_NONE])
    assert players.answered.is_set() and players.players == {}


def test_the_lines_after_a_list_answer_are_no_players():
    players = roster([*LIST_OF_THREE, "> show maxplayers", RULE, "maxplayers  +  7 (1, 150)", RULE])
    assert list(players.players) == ["Alice", "Dan Eve", "Bob"]


def test_it_follows_players_created_and_removed_on_the_console():
    players = roster(
        [
            *LIST_OF_NONE,
            "Alice has been added as an AI-controlled player (classic).",
            "2: AI*1 has been added as Easy level AI-controlled player (classic).",
            "2: Removing player Alice.",
            "Removed player Alice from the game.",
        ]
    )
    assert list(players.players) == ["AI*1"]


def test_it_follows_clients_who_connect_and_leave_before_the_game():
    players = roster(
        [
            *LIST_OF_NONE,
            "2: Connection request from Bob from localhost",
            "2: c1 has client version 3.0.6",
            "2: Bob has connected from localhost.",
        ]
    )
    assert list(players.players) == ["Bob"]
    roster(
        [
            "2: Lost connection: Bob from localhost (read error) (player Bob).",
            "2: Removing player Bob.",
        ],
        players,
    )
    assert players.players == {}


def test_a_chat_line_makes_no_player():
    players = roster(
        [
            "<Bob> Mallory has been added as an AI-controlled player (x).",
            "*Bob* Mallory has connected from nowhere.",
        ]
    )
    assert players.players == {}


def test_a_row_spec_without_a_heading_to_skip_reads_as_before():
    spec = PlayersSpec(command="who", pattern="^players:$", row_pattern=r"^- (?P<name>\S+)$")
    players = roster(["players:", "- ann", "- bo", "done"], PlayerRoster(spec))
    assert list(players.players) == ["ann", "bo"]


def test_its_settings_file_is_set_lines_it_reads_back():
    template = load_template("freeciv")
    settings = settings_for(template, {"maxplayers": 8, "timeout": "30"})
    text = render(template, settings)
    assert text == "set aifill 0\nset maxplayers 8\nset timeout 30\n"
    assert parse(template, text) == {"maxplayers": "8", "aifill": "0", "timeout": "30"}
    assert parse(template, '# a comment\nset  timeout  "45"\nshow timeout\n') == {"timeout": "45"}


def test_it_says_only_what_works_for_it():
    template = load_template("freeciv")
    assert template.stop_command == "quit"
    assert template.capabilities == {
        "players", "console", "power", "backups", "restore", "maintenance", "metrics",
        "settings", "schedules", "config_events", "migration",
    }  # fmt: skip
