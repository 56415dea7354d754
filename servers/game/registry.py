"""The games servers run. The registry is the templates: an agent node offers the games its
heartbeat lists (the shipped templates and its operator's own, `AGENT_GAMES_DIR`), the
simulated node the games of its own templates (`servers/simulated/games/`, which no agent
has). Nothing here lists games of its own.

What the control plane knows of a game beyond its name (capabilities, settings) comes from
its template when it ships with the code; an operator's own template lives on its nodes, so
such a game gets what the agent does for any game (`template` is None for it).
"""

from pathlib import Path

from gshost_agent.templates import GameTemplate, UnknownGame, available_games, load_template
from servers.errors import GameNotOnNode
from servers.models import Node
from servers.runtime import host_traits

SIMULATED_GAMES_DIR = Path(__file__).resolve().parents[1] / "simulated" / "games"
SIMULATED_GAMES: tuple[str, ...] = available_games(SIMULATED_GAMES_DIR)
# A new server's game when none is asked for: the first of these its node offers.
PREFERRED_GAMES = ("demo", "minecraft")


def template(game: str) -> GameTemplate | None:
    """The shipped template of `game` (a simulated game's included); None for an operator's
    own."""
    try:
        if game in SIMULATED_GAMES:
            return load_template(game, SIMULATED_GAMES_DIR)
        return load_template(game)
    except UnknownGame:
        return None


def games_of(node: Node) -> tuple[str, ...]:
    """What the node offers: its heartbeat's list (until its first one, the shipped
    templates); the simulated node, the simulated games."""
    if host_traits(node).invents_readings:
        return SIMULATED_GAMES
    return tuple(node.games) if node.games else available_games()


def default_game(node: Node) -> str:
    games = games_of(node)
    if not games:
        return PREFERRED_GAMES[0]
    return next((game for game in PREFERRED_GAMES if game in games), games[0])


def offered_games(nodes: list[Node]) -> tuple[str, ...]:
    """Every game some of the nodes offers, sorted."""
    return tuple(sorted({game for node in nodes for game in games_of(node)}))


def check_game_on_node(node: Node, game: str) -> None:
    games = games_of(node)
    if game not in games:
        raise GameNotOnNode(node.name, game, games)
