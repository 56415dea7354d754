"""The games servers run. The registry is the templates: an agent node offers the games its
heartbeat lists (the shipped templates and its operator's own, `AGENT_GAMES_DIR`), the
simulated node the games of the simulated runtime. Nothing here lists games of its own.

What the control plane knows of a game beyond its name (capabilities, settings) comes from
the template when it ships with the code; an operator's own template lives on its nodes, so
such a game gets what the agent does for any game (`template` is None for it).
"""

from gshost_agent.templates import GameTemplate, UnknownGame, available_games, load_template
from servers.errors import GameNotOnNode
from servers.models import Node

# The games the simulated node runs: its own stand-ins for templates (agent nodes' games are
# their templates, listed in their heartbeats).
SIMULATED_GAMES: tuple[str, ...] = ("minecraft", "custom")
PREFERRED_GAME = "demo"  # a new server's game when none is asked for and its node offers it


def template(game: str) -> GameTemplate | None:
    """The shipped template of `game`; None for a simulated game or an operator's own."""
    if game in SIMULATED_GAMES:
        return None
    try:
        return load_template(game)
    except UnknownGame:
        return None


def games_of(node: Node) -> tuple[str, ...]:
    """What the node offers: its heartbeat's list (until its first one, the shipped
    templates); the simulated node, the simulated games."""
    if not node.is_agent:
        return SIMULATED_GAMES
    return tuple(node.games) if node.games else available_games()


def default_game(node: Node) -> str:
    games = games_of(node)
    return PREFERRED_GAME if PREFERRED_GAME in games or not games else games[0]


def offered_games(nodes: list[Node]) -> tuple[str, ...]:
    """Every game some of the nodes offers, sorted."""
    return tuple(sorted({game for node in nodes for game in games_of(node)}))


def check_game_on_node(node: Node, game: str) -> None:
    games = games_of(node)
    if game not in games:
        raise GameNotOnNode(node.name, game, games)
