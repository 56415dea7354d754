"""Every shipped template's game, run sandboxed by a real agent, has readings of its own
process tree while it runs (memory and uptime above zero)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gshost_agent import games
from tests.agent.lines import wait_until
from tests.agent.test_freeciv import SETTINGS as FREECIV_SETTINGS

SHIPPED = sorted(path.stem for path in Path(games.__file__).parent.glob("*.toml"))
SETTINGS: dict[str, dict[str, Any]] = {"freeciv": FREECIV_SETTINGS}


def test_the_shipped_templates_are_the_demo_and_freeciv() -> None:
    assert SHIPPED == ["demo", "freeciv"]


def running_game(agent: Any, control_plane: Any, game: str) -> str:
    server_id, _port = agent.start_server(game, memory_mb=1024, settings=SETTINGS.get(game, {}))
    control_plane.wait_for_report(server_id, "ready", timeout=60)
    return server_id


@pytest.mark.parametrize("game", SHIPPED)
def test_a_running_game_has_memory_and_uptime(game, module_agent, module_control_plane):
    server_id = running_game(module_agent, module_control_plane, game)

    def grown() -> dict[str, Any] | None:
        stats = module_agent.request("GET", f"/v1/servers/{server_id}/stats").json()
        return stats if stats["uptime_seconds"] > 0 else None

    stats = wait_until(grown, timeout=10, interval=0.2)
    assert stats["state"] == "running"
    assert stats["memory_mb"] > 0


def test_a_games_readings_reach_the_control_plane_as_soon_as_it_is_ready(
    module_agent, module_control_plane
):
    """The node's heartbeat goes at once when a game becomes ready, not at its next period
    (10 s): the control plane, which never calls the node for readings, shows them at once."""
    server_id = running_game(module_agent, module_control_plane, "demo")

    def sent() -> dict[str, Any] | None:
        with module_control_plane.lock:
            beats = list(module_control_plane.heartbeats)
        readings = [beat.get("readings", {}).get(server_id) or {} for beat in beats]
        # A periodic heartbeat may have caught the game still starting: the one that counts
        # is the first to show it running.
        running = (r for r in readings if r.get("state") == "running")
        return next((r for r in running if r.get("memory_mb", 0) > 0), None)

    # Within 3 s of its ready report, where the period alone would take up to 10 s.
    assert wait_until(sent, timeout=3, interval=0.1)["memory_mb"] > 0
