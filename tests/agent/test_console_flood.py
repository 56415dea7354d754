"""A game that floods its console costs the node no more than its own cpu share and 5 % of one
core: the keeper reads its output within that share, keeps at most 2,000 lines a second and
says `output throttled` for the rest; a game printing less has every line, in order."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from gshost_agent.console_output import LINES_PER_SECOND, THROTTLED_NOTICE
from tests.agent.conftest import AgentFactory
from tests.agent.lines import wait_until

CPU_PERCENT = 20
FLOOD_SECONDS = 10
NODE_SHARE = 0.05  # of one core, beyond the game's own

# Prints as fast as it can when told (`flood SECONDS`), or numbered lines at a steady rate
# (`pace RATE SECONDS`); then, once a quiet second has passed, how many it printed, also in
# `printed` in its directory.
FLOODER = """
import sys, time

def flood(seconds):
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        for _ in range(1000):
            print(f"flood {n}")
            n += 1
    return n

def pace(rate, seconds):
    begun, n = time.monotonic(), 0
    while (elapsed := time.monotonic() - begun) < seconds:
        while n < int(elapsed * rate):
            print(f"line {n}")
            n += 1
        sys.stdout.flush()
        time.sleep(0.005)
    return n

print("ready", flush=True)
for command in sys.stdin:
    words = command.split()
    if words[0] == "flood":
        printed = flood(float(words[1]))
    else:
        printed = pace(int(words[1]), float(words[2]))
    sys.stdout.flush()
    time.sleep(1.1)
    print(f"printed {printed}", flush=True)
    with open("printed", "w") as file:
        file.write(str(printed))
"""

FLOODER_TEMPLATE = """
name = "flooder"
command = ["{python}", "-I", "{game_files}/flooder.py"]
files = ["flooder.py"]
ready_pattern = '^ready$'
stop_command = ""
stop_timeout_seconds = 2
"""


@pytest.fixture(scope="module")
def flood_agent(certificates, games_dir, module_control_plane):
    """One agent for the module; each test floods a game of its own."""
    (games_dir / "flooder.toml").write_text(FLOODER_TEMPLATE)
    (games_dir / "flooder.py").write_text(FLOODER)
    factory = AgentFactory(certificates, games_dir, module_control_plane)
    agent = factory.make()
    agent.start()
    yield agent
    factory.clean_up()


@pytest.fixture
def flooder(flood_agent, module_control_plane):
    server_id, _ = flood_agent.start_server("flooder", cpu_percent=CPU_PERCENT)
    module_control_plane.wait_for_report(server_id, "ready")
    yield flood_agent, server_id
    assert flood_agent.request("POST", f"/v1/servers/{server_id}/kill").status_code == 202
    module_control_plane.wait_for_report(server_id, "crashed")


def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        times = process.cpu_times()
        total += times.user + times.system
    return total


def game_tree(agent, server_id) -> list[psutil.Process]:
    """The game and bubblewrap's processes around it."""
    top = psutil.Process(agent.game_pid(server_id))
    return [top, *top.children(recursive=True)]


def printed(agent, server_id, timeout: float) -> int:
    """What the game says it printed, once it has finished."""
    path = agent.data_dir / "servers" / server_id / "printed"
    return int(wait_until(lambda: path.is_file() and path.read_text(), timeout, interval=0.2))


def held_lines(agent, server_id) -> list[dict]:
    """Every line the agent still holds (its recent lines), oldest first."""
    lines: list[dict] = []
    while True:
        after = lines[-1]["n"] if lines else 0
        page = agent.request("GET", f"/v1/servers/{server_id}/console?after={after}").json()
        if not page["lines"]:
            return lines
        lines += page["lines"]


def lines_until(agent, server_id, text: str) -> list[dict]:
    """The agent's lines, once the last of them is `text`."""
    return wait_until(
        lambda: (lines := held_lines(agent, server_id)) and lines[-1]["text"] == text and lines,
        timeout=10,
        interval=0.2,
    )


def test_a_flood_costs_at_most_the_games_share_and_five_percent_of_one_core(flooder):
    agent, server_id = flooder
    ours = [psutil.Process(agent.process.pid), psutil.Process(agent.keeper_pid(server_id))]
    game = game_tree(agent, server_id)
    began, before = time.monotonic(), [cpu_seconds([p]) for p in (*ours, *game)]
    agent.console(server_id, f"flood {FLOOD_SECONDS}")
    count = printed(agent, server_id, timeout=FLOOD_SECONDS + 30)
    wall = time.monotonic() - began
    used = [cpu_seconds([p]) - b for p, b in zip((*ours, *game), before, strict=True)]
    agent_used, keeper_used, game_used = used[0], used[1], sum(used[2:])
    print(f"{count} lines in {wall:.1f} s, CPU s: agent {agent_used:.2f}, keeper", end=" ")
    print(f"{keeper_used:.2f}, game {game_used:.2f}")
    assert count > 2 * LINES_PER_SECOND * FLOOD_SECONDS  # a flood, far past the cap
    assert agent_used + keeper_used + game_used <= (CPU_PERCENT / 100 + NODE_SHARE) * wall


def test_a_flood_past_the_cap_is_dropped_with_one_notice_a_second(flooder):
    agent, server_id = flooder
    first = agent.request("GET", f"/v1/servers/{server_id}/console").json()["last"]
    agent.console(server_id, "flood 3")
    count = printed(agent, server_id, timeout=40)
    lines = lines_until(agent, server_id, f"printed {count}")
    notices = [line for line in lines if line["text"] == THROTTLED_NOTICE]
    assert notices and all(line.get("daemon") is True for line in notices)
    kept = agent.request("GET", f"/v1/servers/{server_id}/console").json()["last"] - first
    assert kept <= LINES_PER_SECOND * 5 < count  # 3 s of flood, over at most 4 windows
    flood = [int(line["text"].split()[1]) for line in lines if line["text"].startswith("flood ")]
    assert flood == sorted(flood)  # what is kept stays in order
    log = (agent.run_dir(server_id) / "console.log").read_text().splitlines()
    assert 3 <= log.count(THROTTLED_NOTICE) <= 4  # one for each second of the flood


def test_lines_under_the_cap_all_arrive_in_order(flooder):
    agent, server_id = flooder
    first = agent.request("GET", f"/v1/servers/{server_id}/console").json()["last"]
    agent.console(server_id, f"pace {LINES_PER_SECOND // 2} 4")
    count = printed(agent, server_id, timeout=40)
    lines = lines_until(agent, server_id, f"printed {count}")
    numbered = [line["text"] for line in lines if line["text"].startswith("line ")]
    assert numbered == [f"line {n}" for n in range(count - len(numbered), count)]
    assert THROTTLED_NOTICE not in [line["text"] for line in lines]
    last = agent.request("GET", f"/v1/servers/{server_id}/console").json()["last"]
    assert last - first == count + 1  # every line: those and its `printed`
    log = (agent.run_dir(server_id) / "console.log").read_text().splitlines()
    assert [text for text in log if text.startswith("line ")] == [f"line {n}" for n in range(count)]


def keeper_cpu_cgroup(agent, server_id) -> str:
    cgroups = Path(f"/proc/{agent.keeper_pid(server_id)}/cgroup").read_text().splitlines()
    return next(line.split(":")[2] for line in cgroups if line.split(":")[1] == "cpu")


def test_the_keeper_of_a_game_that_floods_reads_within_the_games_cpu_cgroup(flooder):
    agent, server_id = flooder
    agent.console(server_id, "flood 1")
    printed(agent, server_id, timeout=30)
    assert keeper_cpu_cgroup(agent, server_id).endswith(f"/gshost/{server_id}")


def test_the_keeper_of_a_game_under_the_cap_stays_in_the_nodes_share(flooder):
    agent, server_id = flooder
    agent.console(server_id, f"pace {LINES_PER_SECOND // 2} 2")
    printed(agent, server_id, timeout=30)
    assert not keeper_cpu_cgroup(agent, server_id).endswith(server_id)
