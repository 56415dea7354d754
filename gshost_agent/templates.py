"""Game templates: what the data files in `gshost_agent/games/` say about each game.

Read by the agent (how to start, stop, list players, write settings) and by the control plane
(which games a node runs, their capabilities and settings). Standard library only.
"""

import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

GAMES_DIR = Path(__file__).resolve().parent / "games"
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


class UnknownGame(LookupError):
    """No template of that name."""


@dataclass(frozen=True)
class SettingField:
    key: str
    label: str
    kind: str  # integer, choice, boolean or text
    default: str
    choices: tuple[str, ...] = ()
    minimum: int = 0
    maximum: int = 0


@dataclass(frozen=True)
class PlayersSpec:
    command: str
    pattern: str
    separator: str = ","
    # A list answer in rows: after the `pattern` line, `skip_lines` lines of its heading (a
    # table's rule), then each line matching `row_pattern` (its `name`) is a player, other
    # lines are ignored, until a line matching `end_pattern` (without one: the first line
    # that is not a row).
    row_pattern: str = ""
    end_pattern: str = ""
    skip_lines: int = 0
    join_pattern: str = ""
    leave_pattern: str = ""
    max_setting: str = ""


@dataclass(frozen=True)
class GameTemplate:
    name: str
    title: str
    command: tuple[str, ...]
    environment: dict[str, str]
    files: tuple[str, ...]
    ready_pattern: str
    ready_timeout_seconds: int
    stop_command: str
    stop_signal: str
    stop_timeout_seconds: int
    capabilities: frozenset[str]
    wipe_paths: tuple[str, ...]
    players: PlayersSpec | None
    settings_file: str
    settings_format: str
    settings_fields: tuple[SettingField, ...] = field(default=())
    # gitignore patterns of paths no customer may read, write, rename or delete through the
    # file routes or SFTP (gshost_agent.files.jail)
    file_denylist: tuple[str, ...] = ()
    directory: Path = GAMES_DIR  # where the template (and its files) came from

    def default_settings(self) -> dict[str, str]:
        return {spec.key: spec.default for spec in self.settings_fields}


def available_games(directory: Path = GAMES_DIR) -> tuple[str, ...]:
    names = (path.stem for path in directory.glob("*.toml") if _NAME.fullmatch(path.stem))
    return tuple(sorted(names))


@cache
def load_template(name: str, directory: Path = GAMES_DIR) -> GameTemplate:
    """The template of game `name` (from `directory`, default the shipped games); UnknownGame
    when there is none."""
    if not _NAME.fullmatch(name) or not (directory / f"{name}.toml").is_file():
        raise UnknownGame(name)
    data = tomllib.loads((directory / f"{name}.toml").read_text())
    players = data.get("players")
    settings = data.get("settings", {})
    return GameTemplate(
        name=data["name"],
        title=data.get("title", data["name"]),
        command=tuple(data["command"]),
        environment=dict(data.get("environment", {})),
        files=tuple(data.get("files", ())),
        ready_pattern=data["ready_pattern"],
        ready_timeout_seconds=int(data.get("ready_timeout_seconds", 60)),
        stop_command=data.get("stop_command", ""),
        stop_signal=data.get("stop_signal", "SIGTERM"),
        stop_timeout_seconds=int(data.get("stop_timeout_seconds", 30)),
        capabilities=frozenset(data.get("capabilities", ())),
        wipe_paths=tuple(data.get("wipe_paths", ())),
        players=PlayersSpec(**players) if players else None,
        settings_file=settings.get("file", ""),
        settings_format=settings.get("format", "properties"),
        settings_fields=tuple(
            SettingField(**{**spec, "choices": tuple(spec.get("choices", ()))})
            for spec in settings.get("fields", ())
        ),
        file_denylist=tuple(str(pattern) for pattern in data.get("file_denylist", ())),
        directory=directory,
    )


class GameCatalog:
    """The games a node runs: the shipped templates, and an operator's own directory of
    templates beside them (AGENT_GAMES_DIR; a shipped name wins)."""

    def __init__(self, extra: Path | None = None) -> None:
        self.extra = extra

    def names(self) -> tuple[str, ...]:
        extra = available_games(self.extra) if self.extra else ()
        return tuple(sorted({*available_games(), *extra}))

    def capabilities(self) -> dict[str, list[str]]:
        """What each game's template says it can do; a template that cannot be read is left
        out (it cannot start a game either)."""
        found = {}
        for name in self.names():
            try:
                found[name] = sorted(self.get(name).capabilities)
            except (UnknownGame, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError):
                continue
        return found

    def get(self, name: str) -> GameTemplate:
        try:
            return load_template(name)
        except UnknownGame:
            if self.extra is None:
                raise
            return load_template(name, self.extra)
