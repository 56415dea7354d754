"""The heartbeat (`POST /internal/nodes/heartbeat`, agent -> control plane), its readings and
minutes, and its answer."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from gshost_agent.protocol import fields
from gshost_agent.protocol.names import (
    GAME_NAME,
    HEARTBEAT_PLAYERS_LIMIT,
    MAX_MINUTES_IN_READING,
    OUTBOX_ID,
    SERVER_ID_IN_BODY,
    ProtocolError,
    ServerState,
    format_time,
    parse_moment,
)

MAX_SERVERS_IN_HEARTBEAT = 10_000
MAX_GAMES_IN_HEARTBEAT = 500
MAX_CAPABILITIES = 100
MAX_CAPACITY_VALUE = 2**31 - 1
MAX_CPU_PERCENT = 100_000  # a thousand cores
MAX_MEMORY_MB = 2**31 - 1
MAX_PLAYERS = 1_000_000
MAX_PLAYER_NAME = 100
MAX_READING_NUMBER = 2**53
MAX_CONSOLE_KEYS = 100
MAX_PANEL_ORIGINS = 100
MAX_WITHDRAWALS_TAKEN = 1000  # and in an answer: the control plane keeps them 10 minutes
MAX_WITHDRAWAL_ID = 2**63
SFTP_FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")


@dataclass(frozen=True)
class Minute:
    """The means of a server's 10-second samples in one whole UTC minute that has ended."""

    at: datetime  # the minute's start
    cpu_percent: float
    memory_mb: float
    players_online: int

    def to_json(self) -> dict[str, Any]:
        return {
            "at": format_time(self.at),
            "cpu_percent": self.cpu_percent,
            "memory_mb": self.memory_mb,
            "players_online": self.players_online,
        }

    @classmethod
    def from_json(cls, value: Any) -> Minute:
        if not isinstance(value, dict):
            raise ProtocolError(
                "minutes", "a minute is an object of at, cpu_percent, memory_mb, players_online."
            )
        return cls(
            at=_minute_start(value.get("at")),
            cpu_percent=float(_figure(value, "cpu_percent", MAX_CPU_PERCENT)),
            memory_mb=float(_figure(value, "memory_mb", MAX_MEMORY_MB)),
            players_online=int(_figure(value, "players_online", MAX_PLAYERS, whole=True)),
        )


def _minute_start(value: Any) -> datetime:
    found = parse_moment(value)
    try:
        found = None if found is None else found.astimezone(UTC)
    except OverflowError:  # a time beyond UTC's years
        found = None
    if found is None or found.second or found.microsecond:
        raise ProtocolError(
            "minutes", "a minute's at is the start of a minute, ISO 8601 with its offset."
        )
    return found


def _figure(value: dict[str, Any], name: str, highest: int, *, whole: bool = False) -> float:
    figure = value.get(name)
    kind = "an integer" if whole else "a number"
    message = f"a minute's {name} is {kind} from 0 to {highest}."
    if whole:
        return fields.integer(figure, "minutes", 0, highest, message=message)
    return fields.number(figure, "minutes", highest, message=message)


def _minutes(value: Any) -> tuple[Minute, ...]:
    if not isinstance(value, list) or len(value) > MAX_MINUTES_IN_READING:
        raise ProtocolError(
            "minutes", f"minutes is a list of at most {MAX_MINUTES_IN_READING} minutes."
        )
    return tuple(Minute.from_json(item) for item in value)


@dataclass(frozen=True)
class Stats:
    """A server's latest figures (`GET /v1/servers/{id}/stats`, and a running one's reading)."""

    sampled_at: datetime
    cpu_percent: float = 0.0
    memory_mb: float = 0.0
    memory_limit_mb: int | None = None
    disk_mb: float = 0.0
    players_online: int = 0
    uptime_seconds: int = 0
    state: ServerState | None = None

    def to_json(self) -> dict[str, Any]:
        stated = {} if self.state is None else {"state": str(self.state)}
        return stated | {
            "sampled_at": format_time(self.sampled_at),
            "cpu_percent": self.cpu_percent,
            "memory_mb": self.memory_mb,
            "memory_limit_mb": self.memory_limit_mb,
            "disk_mb": self.disk_mb,
            "network_in_kbps": None,
            "network_out_kbps": None,
            "players_online": self.players_online,
            "uptime_seconds": self.uptime_seconds,
        }

    @classmethod
    def from_json(cls, value: Any) -> Stats:
        value = fields.obj(value, "readings", "an object")
        state = value.get("state")
        if state is not None and state not in set(ServerState):
            raise ProtocolError("readings", "a reading's state is a server state.")
        limit = value.get("memory_limit_mb")
        return cls(
            sampled_at=fields.required_moment(value.get("sampled_at"), "readings"),
            cpu_percent=float(_reading_number(value.get("cpu_percent"))),
            memory_mb=float(_reading_number(value.get("memory_mb"))),
            memory_limit_mb=None if limit is None else _reading_whole(limit),
            disk_mb=float(_reading_number(value.get("disk_mb"))),
            players_online=_reading_whole(value.get("players_online")),
            uptime_seconds=_reading_whole(value.get("uptime_seconds")),
            state=None if state is None else ServerState(state),
        )


def _reading_number(value: Any) -> float:
    message = "a reading's figures are non-negative numbers."
    return fields.number(value, "readings", MAX_READING_NUMBER, message=message)


def _reading_whole(value: Any) -> int:
    message = "a reading's counts are non-negative integers."
    return fields.integer(value, "readings", 0, MAX_READING_NUMBER, message=message)


@dataclass(frozen=True)
class Player:
    name: str
    joined_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "joined_at": format_time(self.joined_at)}

    @classmethod
    def from_json(cls, value: Any) -> Player:
        value = fields.obj(value, "readings", "an object of name and joined_at")
        name = value.get("name")
        if not isinstance(name, str) or len(name) > MAX_PLAYER_NAME or not name.isprintable():
            raise ProtocolError("readings", "a player's name is a line of at most 100 characters.")
        return cls(name, fields.required_moment(value.get("joined_at"), "readings"))


@dataclass(frozen=True)
class Reading:
    """One server's entry in a heartbeat's `readings`: its settings file as on disk; while it
    is not stopped, its stats, players and their maximum; its minutes not acknowledged yet."""

    settings: dict[str, Any] | None = None
    stats: Stats | None = None
    players: tuple[Player, ...] = ()
    max_players: int | None = None
    minutes: tuple[Minute, ...] = ()

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {} if self.settings is None else {"settings": self.settings}
        if self.stats is not None:
            found |= self.stats.to_json()
            found["players"] = [player.to_json() for player in self.players]
            found["max_players"] = self.max_players
        if self.minutes:
            found["minutes"] = [minute.to_json() for minute in self.minutes]
        return found

    @classmethod
    def from_json(cls, value: Any) -> Reading:
        value = fields.obj(value, "readings", "an object")
        settings = value.get("settings")
        if settings is not None and not isinstance(settings, dict):
            raise ProtocolError("readings", "a reading's settings are an object.")
        players = value.get("players") or []
        if not isinstance(players, list) or len(players) > HEARTBEAT_PLAYERS_LIMIT:
            raise ProtocolError("readings", f"at most {HEARTBEAT_PLAYERS_LIMIT} players.")
        maximum = value.get("max_players")
        minutes = value.get("minutes")
        return cls(
            settings=settings,
            stats=Stats.from_json(value) if "sampled_at" in value else None,
            players=tuple(Player.from_json(player) for player in players),
            max_players=None if maximum is None else _reading_whole(maximum),
            minutes=() if minutes is None else _minutes(minutes),
        )


@dataclass(frozen=True)
class Capacity:
    """What a node's machine offers, as its agent tells (None where it cannot)."""

    memory_mb: int | None = None
    disk_mb: int | None = None
    cpu_percent: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Any) -> Capacity:
        value = fields.obj(value or {}, "capacity", "an object of memory_mb, disk_mb, cpu_percent")
        figures: dict[str, int | None] = {}
        for key in ("memory_mb", "disk_mb", "cpu_percent"):
            figure = value.get(key)
            message = f"capacity.{key} must be a non-negative integer or null."
            figures[key] = (
                None
                if figure is None
                else fields.integer(figure, "capacity", 0, MAX_CAPACITY_VALUE, message=message)
            )
        return cls(**figures)


@dataclass(frozen=True)
class SftpEndpoint:
    """Where the node's agent serves SFTP (`port` None: it does not) and its host key's
    `fingerprint` (`SHA256:…`, empty when it has none)."""

    port: int | None = None
    fingerprint: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"port": self.port, "fingerprint": self.fingerprint or None}

    @classmethod
    def from_json(cls, value: Any) -> SftpEndpoint:
        message = "sftp is an object of port (1-65535 or null) and fingerprint (SHA256:… or null)."
        value = fields.obj(value, "sftp", "an object of port and fingerprint")
        port, fingerprint = value.get("port"), value.get("fingerprint")
        if port is not None:
            fields.integer(port, "sftp", 1, 65535, message=message)
        if fingerprint is not None and (
            not isinstance(fingerprint, str) or not SFTP_FINGERPRINT.fullmatch(fingerprint)
        ):
            raise ProtocolError("sftp", message)
        return cls(port=port, fingerprint=fingerprint or "")


@dataclass(frozen=True)
class Heartbeat:
    """What an agent tells every 10 s. `readings` are each server's `Reading` as sent
    (`Reading.to_json()`): the control plane keeps them as they came and reads each when it
    shows it; their `minutes` are read at once (they are stored)."""

    agent_version: str
    servers: dict[str, ServerState]
    outbox_id: str | None = None
    isolation: str | None = None
    games: tuple[str, ...] | None = None
    game_capabilities: dict[str, tuple[str, ...]] | None = None
    capacity: Capacity = field(default_factory=Capacity)
    readings: dict[str, dict[str, Any]] = field(default_factory=dict)
    sftp: SftpEndpoint | None = None  # None: an agent that does not say
    # The ids of the withdrawals it holds (from earlier answers), for the control plane to drop.
    withdrawals_taken: tuple[int, ...] = ()

    @cached_property
    def minutes(self) -> dict[str, tuple[Minute, ...]]:
        """Each server's minutes in the readings (ProtocolError of `minutes` when unsound)."""
        found = {}
        for server_id, reading in self.readings.items():
            value = reading.get("minutes") if isinstance(reading, dict) else None
            if value is None:
                continue
            if not SERVER_ID_IN_BODY.fullmatch(server_id):
                raise ProtocolError(
                    "minutes", "minutes are sent in the readings of server ids (srv_…)."
                )
            found[server_id] = _minutes(value)
        return found

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"agent_version": self.agent_version}
        if self.outbox_id is not None:
            body["outbox_id"] = self.outbox_id
        if self.isolation is not None:
            body["isolation"] = self.isolation
        body["servers"] = {server_id: str(state) for server_id, state in self.servers.items()}
        if self.games is not None:
            body["games"] = list(self.games)
        if self.game_capabilities is not None:
            body["game_capabilities"] = {
                game: list(listed) for game, listed in self.game_capabilities.items()
            }
        body["capacity"] = self.capacity.to_json()
        body["readings"] = self.readings
        if self.sftp is not None:
            body["sftp"] = self.sftp.to_json()
        if self.withdrawals_taken:
            body["withdrawals_taken"] = list(self.withdrawals_taken)
        return body

    @classmethod
    def from_json(cls, body: Any) -> Heartbeat:
        body = fields.obj(body, "body", "a JSON object")
        version = body.get("agent_version")
        if not isinstance(version, str) or len(version) > 100 or not version.isprintable():
            raise ProtocolError(
                "agent_version", "agent_version must be a string of at most 100 characters."
            )
        heartbeat = cls(
            agent_version=version,
            servers=_servers(body.get("servers")),
            outbox_id=fields.text(body, "outbox_id", pattern=OUTBOX_ID, optional=True),
            isolation=fields.text(body, "isolation", longest=100, optional=True),
            games=_games(body.get("games")),
            game_capabilities=_game_capabilities(body.get("game_capabilities")),
            capacity=Capacity.from_json(body.get("capacity")),
            readings=_readings(body.get("readings")),
            sftp=None if body.get("sftp") is None else SftpEndpoint.from_json(body["sftp"]),
            withdrawals_taken=_withdrawals_taken(body.get("withdrawals_taken")),
        )
        heartbeat.minutes  # noqa: B018  # read now: an unsound minute refuses the heartbeat
        return heartbeat


def _servers(value: Any) -> dict[str, ServerState]:
    message = "servers maps server ids to states."
    if not isinstance(value, dict) or len(value) > MAX_SERVERS_IN_HEARTBEAT:
        raise ProtocolError("servers", message)
    for server_id, state in value.items():
        if not SERVER_ID_IN_BODY.fullmatch(server_id) or state not in set(ServerState):
            raise ProtocolError("servers", message)
    return {server_id: ServerState(state) for server_id, state in value.items()}


def _games(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None  # an agent that does not list them
    what = "a list of template names"
    games = fields.strings(value, "games", MAX_GAMES_IN_HEARTBEAT, what)
    if not all(GAME_NAME.fullmatch(game) for game in games):
        raise ProtocolError("games", f"games must be {what}.")
    return games


def _game_capabilities(value: Any) -> dict[str, tuple[str, ...]] | None:
    if value is None:
        return None
    message = "game_capabilities maps template names to lists of capabilities."
    if not isinstance(value, dict) or len(value) > MAX_GAMES_IN_HEARTBEAT:
        raise ProtocolError("game_capabilities", message)
    found = {}
    for game, listed in value.items():
        if not GAME_NAME.fullmatch(game):
            raise ProtocolError("game_capabilities", message)
        found[game] = fields.strings(listed, "game_capabilities", MAX_CAPABILITIES, message)
    return found


def _withdrawals_taken(value: Any) -> tuple[int, ...]:
    value = value or []
    message = "withdrawals_taken is a list of ids."
    if not isinstance(value, list) or len(value) > MAX_WITHDRAWALS_TAKEN:
        raise ProtocolError("withdrawals_taken", message)
    return tuple(
        fields.integer(item, "withdrawals_taken", 0, MAX_WITHDRAWAL_ID, message=message)
        for item in value
    )


def _readings(value: Any) -> dict[str, dict[str, Any]]:
    """Checked for their shape only: each is read when it is shown."""
    value = value or {}
    if not isinstance(value, dict) or len(value) > MAX_SERVERS_IN_HEARTBEAT:
        raise ProtocolError("readings", "readings maps server ids to objects.")
    return value


@dataclass(frozen=True)
class ConsoleChecks:
    """What a node's console websocket checks (docs/console.md): the public keys (JWKs, by
    their `kid`) the control plane signs console tokens with, and the origins a browser may
    open a socket from. Each key is read by the agent: one it cannot read is ignored."""

    keys: tuple[dict[str, Any], ...] = ()
    origins: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "origins": list(self.origins)}

    @classmethod
    def from_json(cls, value: Any) -> ConsoleChecks:
        value = fields.obj(value, "console", "an object of keys and origins")
        keys = value.get("keys") or []
        if not isinstance(keys, list) or len(keys) > MAX_CONSOLE_KEYS:
            raise ProtocolError("console", "console.keys is a list of JWKs.")
        return cls(
            keys=tuple(fields.obj(key, "console", "an object of keys (JWKs)") for key in keys),
            origins=fields.strings(
                value.get("origins") or [], "console", MAX_PANEL_ORIGINS, "a list of origins"
            ),
        )


@dataclass(frozen=True)
class HeartbeatAnswer:
    """The control plane's answer to a heartbeat (200): the node's name; what its console
    sockets check; the withdrawals of access it has not said it holds, each a `Withdrawal`'s
    JSON with its `id` (`gshost_agent.withdrawals` reads each: one it cannot is ignored).
    `console` and `withdrawals` are left out when None (a control plane that sends none)."""

    node: str
    console: ConsoleChecks | None = None
    withdrawals: tuple[dict[str, Any], ...] | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"node": self.node}
        if self.console is not None:
            body["console"] = self.console.to_json()
        if self.withdrawals is not None:
            body["withdrawals"] = list(self.withdrawals)
        return body

    @classmethod
    def from_json(cls, body: Any) -> HeartbeatAnswer:
        body = fields.obj(body, "body", "a JSON object")
        console, withdrawals = body.get("console"), body.get("withdrawals")
        if withdrawals is not None and (
            not isinstance(withdrawals, list) or len(withdrawals) > MAX_WITHDRAWALS_TAKEN
        ):
            raise ProtocolError("withdrawals", "withdrawals is a list of withdrawals.")
        return cls(
            node=fields.required_text(body, "node"),
            console=None if console is None else ConsoleChecks.from_json(console),
            withdrawals=None
            if withdrawals is None
            else tuple(
                fields.obj(item, "withdrawals", "a list of withdrawals") for item in withdrawals
            ),
        )
