"""Every game is defined once, by its template: the simulated node's games too."""

from gshost_agent.templates import GameCatalog
from servers.game.registry import SIMULATED_GAMES, template
from servers.game.settings import specs_for


def test_the_simulated_nodes_games_are_templates_of_its_own():
    assert SIMULATED_GAMES == ("custom", "minecraft")
    assert all(template(game) is not None for game in SIMULATED_GAMES)


def test_no_agent_offers_a_simulated_game():
    assert not set(GameCatalog().names()) & set(SIMULATED_GAMES)


def test_a_simulated_games_settings_come_from_its_template():
    assert [spec.key for spec in specs_for("custom")] == ["max_players", "motd", "tick_rate"]
    (pvp,) = [spec for spec in specs_for("minecraft") if spec.key == "pvp"]
    assert (pvp.kind, pvp.default) == ("boolean", "true")
