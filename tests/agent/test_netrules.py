"""The node's packet rules (gshost_agent/netrules.py) applied by real iptables and ip6tables
to a network namespace of their own, as an agent at its start applies them to its node's."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator

import pytest

from gshost_agent import netrules
from gshost_agent.netns import Networks, Registry, Slot, forwarding_rules
from tests.agent.node_namespace import EARLIER_AGENTS_RULES, remove_leftovers, run

GAMES_FORWARDING = "-A " + netrules.forwarding_rules("100.72.0.6", 27015)[0]


@pytest.fixture
def namespace() -> Iterator[str]:
    remove_leftovers()
    name = f"gsnet{os.getpid()}r"
    run("ip", "netns", "add", name)
    yield name
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)


def listing(namespace: str, table: str, tool: str = "iptables") -> list[str]:
    inside = ("nsenter", f"--net=/run/netns/{namespace}")
    return run(*inside, tool, "-w", "-t", table, "-S").splitlines()


def bring_up_to_date(namespace: str) -> list[str | None]:
    """What an agent's start restores, table by table (None: nothing to do)."""
    inside = ("nsenter", f"--net=/run/netns/{namespace}")
    applied = []
    for table in ("nat", "filter"):
        restore = netrules.restore_v4(table, "\n".join(listing(namespace, table)))
        if restore is not None:
            run(*inside, "iptables-restore", "-w", "--noflush", stdin=restore)
        applied.append(restore)
    restore = netrules.restore_v6("filter", "\n".join(listing(namespace, "filter", "ip6tables")))
    if restore is not None:
        run(*inside, "ip6tables-restore", "-w", "--noflush", stdin=restore)
    return [*applied, restore]


def test_a_fresh_node_gets_every_rule_and_a_second_start_changes_nothing(namespace):
    bring_up_to_date(namespace)
    rules = listing(namespace, "filter")
    assert [r for r in rules if r.startswith("-A FORWARD")] == netrules.HOOKS_V4["filter"][2:]
    assert [r for r in rules if r.startswith("-A GSHOST-FWD")] == (
        netrules.OWN_CHAINS_V4["filter"]["GSHOST-FWD"]
    )
    assert bring_up_to_date(namespace) == [None, None, None]


def test_an_earlier_agents_rules_are_replaced_and_running_games_keep_their_forwarding(namespace):
    inside = ("nsenter", f"--net=/run/netns/{namespace}")
    run(*inside, "iptables-restore", "-w", "--noflush", stdin=EARLIER_AGENTS_RULES)
    run(*inside, "iptables", "-w", "-t", "nat", *GAMES_FORWARDING.split())
    bring_up_to_date(namespace)
    forward = [r for r in listing(namespace, "filter") if r.startswith("-A FORWARD")]
    assert forward == netrules.HOOKS_V4["filter"][2:]  # the earlier ACCEPTs gone
    assert GAMES_FORWARDING in listing(namespace, "nat")


def test_nothing_goes_to_from_or_through_a_games_link_over_ipv6(namespace):
    bring_up_to_date(namespace)
    rules = listing(namespace, "filter", "ip6tables")
    assert [r for r in rules if r.startswith("-A ")] == netrules.HOOKS_V6["filter"]


def wrapped(tmp_path, namespace: str, tool: str) -> str:
    """`tool` run in the namespace, each run noted in `<tmp_path>/runs`."""
    script = tmp_path / tool
    script.write_text(
        f"#!/bin/sh\necho {tool} >> {tmp_path}/runs\n"
        f'exec nsenter --net=/run/netns/{namespace} {tool} "$@"\n'
    )
    script.chmod(0o755)
    return str(script)


def test_the_forwarding_of_stops_under_way_goes_in_one_run_even_with_a_rule_gone(
    namespace, tmp_path
):
    bring_up_to_date(namespace)
    slots = [Slot(number) for number in (1, 2, 3)]
    rules = [rule for slot in slots for rule in forwarding_rules(slot, 27000 + slot.number)]
    inside = ("nsenter", f"--net=/run/netns/{namespace}")
    added = "".join(f"-A {rule}\n" for rule in rules[:4])  # slot 3's were removed already
    run(*inside, "iptables-restore", "-w", "--noflush", stdin=f"*nat\n{added}COMMIT\n")
    tools = [wrapped(tmp_path, namespace, tool) for tool in ("iptables", "iptables-restore")]
    idle = tmp_path / "no-ip"  # these slots' names may be real games' on this machine: untouched
    idle.write_text("#!/bin/sh\n")
    idle.chmod(0o755)
    networks = Networks(str(idle), *tools, Registry(tmp_path / "registry"), pool_size=0)

    async def stop_all() -> None:
        stops = (networks.close(s, 27000 + s.number, keep=False) for s in slots)
        await asyncio.gather(*stops)

    asyncio.run(stop_all())

    assert not [r for r in listing(namespace, "nat") if r.startswith("-A GSHOST-DNAT")]
    runs = (tmp_path / "runs").read_text().split()
    assert runs.count("iptables-restore") == 1  # the three stops' rules together
