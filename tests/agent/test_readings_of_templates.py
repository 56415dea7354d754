"""Every shipped template's game, run sandboxed by a real agent, has readings of its own
process tree while it runs (memory and uptime above zero), and its node sends them as soon as
the game is ready: the control plane shows a running server's readings only once a heartbeat
brought them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gshost_agent import games
from tests.agent.lines import wait_until
from tests.agent.test_freeciv import SETTINGS as FREECIV_SETTINGS

SHIPPED = sorted(path.stem for path in Path(games.__file__).parent.glob("*.toml"))
SETTINGS: dict[str, dict[str, Any]] = {"freeciv": FREECIV_SETTINGS}
HEARTBEAT_SECONDS = 10  # the agent's period: a reading that waits for the next one is late


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
