"""Plausible, deterministic numbers for the simulated runtime: the same server at the same
moment always gives the same players, stats and metrics, whichever process is asked.

Everything is derived from a hash of (server id, what, time bucket); nothing is stored.
"""

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

SESSION_BLOCK_SECONDS = 10_800  # each regular plays at most one session per three hours
STATS_BUCKET_SECONDS = 5  # a realtime sample changes every five seconds
MEMORY_LIMIT_MB = 4096

PLAYER_NAMES = (
    "Steve_Builds", "AlexTheMiner", "CreeperHugger", "RedstoneRita", "NetherNate",
    "EnderElla", "PixelPaul", "BlockyBen", "DiamondDana", "GhastGus", "LavaLiam",
    "MossyMia", "ObsidianOli", "PickaxePia", "QuartzQuinn", "SlimeSam", "TorchTess",
    "VillagerVic", "WitherWill", "ZombieZoe", "CactusCal", "BirchBea", "CoralCy",
    "DripstoneDee", "ElytraEd", "FoxFinn", "GlowGrace", "HoneyHal", "IronIvy",
    "JungleJo", "KelpKai", "LanternLu", "MangroveMo", "NautilusNed", "OcelotOra",
    "PandaPip", "RavagerRoy", "SnifferSky", "TurtleTy", "WardenWren",
)  # fmt: skip


def unit(*parts: object) -> float:
    """A number in [0, 1) fixed by `parts`."""
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _bucket(moment: datetime, seconds: int) -> int:
    return int(moment.timestamp()) // seconds


def _popularity(server_id: str) -> float:
    """The chance that a regular plays at all in a given three hours, per server."""
    return 0.15 + 0.45 * unit(server_id, "popularity")


@dataclass(frozen=True)
class SimulatedPlayer:
    name: str
    joined_at: datetime


def _session(server_id: str, name: str, block: int) -> tuple[datetime, datetime] | None:
    """The one session (start, end) the player has in this three-hour block, if any."""
    if unit(server_id, name, block) >= _popularity(server_id):
        return None
    start = block * SESSION_BLOCK_SECONDS + int(unit(server_id, name, block, "start") * 10_800)
    length = 1200 + int(unit(server_id, name, block, "length") * 9000)  # 20 to 170 minutes
    return datetime.fromtimestamp(start, tz=UTC), datetime.fromtimestamp(start + length, tz=UTC)


def _online_since(server_id: str, name: str, moment: datetime) -> datetime | None:
    block = _bucket(moment, SESSION_BLOCK_SECONDS)
    for candidate in (block - 1, block):  # a session is shorter than a block
        session = _session(server_id, name, candidate)
        if session is not None and session[0] <= moment < session[1]:
            return session[0]
    return None


def players_online(
    server_id: str, running_since: datetime | None, now: datetime, max_players: int
) -> list[SimulatedPlayer]:
    """Who is online at `now`; nobody unless the server has been running since `running_since`."""
    if running_since is None or max_players < 1:
        return []
    online = []
    for name in PLAYER_NAMES:
        since = _online_since(server_id, name, now)
        if since is None:
            continue
        if since < running_since:  # waiting for the server: reconnects a little after it is up
            since = running_since + timedelta(seconds=20 + int(280 * unit(server_id, name, "wait")))
        if since <= now:
            online.append(SimulatedPlayer(name, since))
    online.sort(key=lambda player: (player.joined_at, player.name))
    return online[:max_players]


def player_count_at(server_id: str, moment: datetime, max_players: int) -> int:
    count = sum(1 for name in PLAYER_NAMES if _online_since(server_id, name, moment) is not None)
    return min(count, max(max_players, 0))


@dataclass(frozen=True)
class Usage:
    cpu_percent: float
    memory_mb: int
    network_in_kbps: float
    network_out_kbps: float


def usage(server_id: str, state: str, moment: datetime, players: int) -> Usage:
    """Resource use in the five seconds around `moment`, for a server in `state`."""
    if state == "stopped":
        return Usage(0.0, 0, 0.0, 0.0)
    noise = unit(server_id, "usage", _bucket(moment, STATS_BUCKET_SECONDS))
    if state in ("starting", "restarting"):
        return Usage(round(70 + 25 * noise, 1), int(600 + 400 * noise), 0.5, 0.5)
    if state == "stopping":
        return Usage(round(20 + 20 * noise, 1), int(900 + 300 * noise), 0.5, 0.5)
    base_memory = 900 + int(900 * unit(server_id, "memory"))
    cpu = min(99.0, 6 + 14 * noise + 3.5 * players)
    memory = min(MEMORY_LIMIT_MB, base_memory + 45 * players + int(150 * noise))
    per_player = 25 + 35 * unit(server_id, "bandwidth")
    return Usage(
        round(cpu, 1),
        memory,
        round(2 + per_player * players * (0.8 + 0.4 * noise), 1),
        round(3 + per_player * 2.5 * players * (0.8 + 0.4 * noise), 1),
    )


def disk_mb(server_id: str, moment: datetime) -> int:
    """The world grows slowly (10 MB a day over a yearly cycle) from a per-server base."""
    base = 1500 + int(6000 * unit(server_id, "disk"))
    day_of_cycle = int(moment.timestamp() // 86400) % 365
    return base + 10 * day_of_cycle


def command_output(game: str, command: str, players: list[str]) -> tuple[bool, str]:
    """What the game answers on its console: (accepted, output)."""
    verb = command.split(maxsplit=1)[0].lower().lstrip("/") if command.strip() else ""
    if game != "minecraft":
        return True, f"> {command}"
    if verb == "stop":
        return False, "Refused: use the power controls to stop the server."
    if verb == "list":
        names = ", ".join(players)
        return True, f"There are {len(players)} players online: {names}"
    if verb == "say":
        return True, f"[Server] {command.split(maxsplit=1)[1] if ' ' in command else ''}"
    if verb in MINECRAFT_COMMANDS:
        return True, f"Executed: {command}"
    return False, f"Unknown or incomplete command: {verb}"


MINECRAFT_COMMANDS = frozenset(
    {
        "ban", "ban-ip", "banlist", "clear", "deop", "difficulty", "effect", "gamemode",
        "gamerule", "give", "help", "kick", "kill", "list", "me", "msg", "op", "pardon",
        "save-all", "save-off", "save-on", "say", "seed", "setworldspawn", "spawnpoint",
        "summon", "teleport", "tell", "tellraw", "time", "title", "tp", "weather",
        "whitelist", "worldborder", "xp",
    }
)  # fmt: skip
