"""The node's packet rules for games' networks (iptables and ip6tables, Debian's), as
`iptables -S` writes them, the one `iptables-restore --noflush` input that brings a table from
what it holds to them, and the kernel's settings for the node and the games' links.

IPv4, in chains of our own:
- nat GSHOST-DNAT (from PREROUTING and OUTPUT, for the node's own addresses): each game's port
  to the game's address (`forwarding_rules`, one pair per running game);
- nat GSHOST-SNAT (from POSTROUTING): a player on the node's loopback is masqueraded (a
  127.0.0.1 source cannot leave it), and games reach other hosts behind the node's address;
- filter GSHOST-IN (from INPUT, for the games' links): a game reaches nothing on the node
  itself (the agent, a database on loopback or any address), only answers to players;
- filter GSHOST-FWD (from FORWARD, to or from the games' links): what reaches a game was sent
  to the node's address and forwarded to the game's port (DNATed: a player's path, also from
  another game); a game sends only from its own network to hosts outside the games' network.
  A game's 100.72.x address is reached by nothing but its players' forwarded traffic.
- filter INPUT: a packet to 127.0.0.0/8 that did not come from the node itself is dropped, the
  rule kube-proxy has since CVE-2020-8558, for the links where the kernel's `route_localnet`
  lets such packets in (the games' links, which need it for players on the node's loopback).
IPv6: nothing goes to, from or through a game's link (the links have no IPv6 of their own,
`gshost_agent.netns`; these rules are the second wall).

Rules in the kernel's chains go first, so a firewall's own ACCEPT rules after them do not open
what they close. Rules an earlier agent wrote that let games reach each other are removed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from pathlib import Path

NETWORK = ipaddress.IPv4Network("100.72.0.0/16")
PREFIX = "gsh"
GAME_LINKS = f"{PREFIX}h+"  # the node's ends of the games' veth pairs

# Chains of ours whose rules are all written here: rewritten whole when they differ.
OWN_CHAINS_V4: dict[str, dict[str, list[str]]] = {
    "nat": {
        "GSHOST-SNAT": [
            f"-A GSHOST-SNAT -s 127.0.0.0/8 -d {NETWORK} -j MASQUERADE",
            f"-A GSHOST-SNAT -s {NETWORK} ! -d {NETWORK} -j MASQUERADE",
        ],
    },
    "filter": {
        "GSHOST-IN": [
            "-A GSHOST-IN -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
            "-A GSHOST-IN -j DROP",
        ],
        "GSHOST-FWD": [
            "-A GSHOST-FWD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
            f"-A GSHOST-FWD -o {GAME_LINKS} -m conntrack --ctstate DNAT -j ACCEPT",
            f"-A GSHOST-FWD -s {NETWORK} ! -d {NETWORK} -i {GAME_LINKS} -j ACCEPT",
            "-A GSHOST-FWD -j DROP",
        ],
    },
}
# Chains of ours that hold the games' rules (`forwarding_rules`): made, never rewritten.
GAME_CHAINS_V4 = {"nat": ["GSHOST-DNAT"]}
# Rules in the kernel's chains, in the order they stand at the top.
HOOKS_V4 = {
    "nat": [
        "-A PREROUTING -m addrtype --dst-type LOCAL -j GSHOST-DNAT",
        "-A OUTPUT -m addrtype --dst-type LOCAL -j GSHOST-DNAT",
        "-A POSTROUTING -j GSHOST-SNAT",
    ],
    "filter": [
        "-A INPUT ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m conntrack "
        "! --ctstate RELATED,ESTABLISHED,DNAT -j DROP",
        f"-A INPUT -i {GAME_LINKS} -j GSHOST-IN",
        f"-A FORWARD -i {GAME_LINKS} -j GSHOST-FWD",
        f"-A FORWARD -o {GAME_LINKS} -j GSHOST-FWD",
    ],
}
# What agents before wrote that these rules replace (every game reached every other's ports).
LEGACY_V4 = {"filter": [f"-A FORWARD -s {NETWORK} -j ACCEPT", f"-A FORWARD -d {NETWORK} -j ACCEPT"]}
HOOKS_V6 = {
    "filter": [
        f"-A INPUT -i {GAME_LINKS} -j DROP",
        f"-A FORWARD -i {GAME_LINKS} -j DROP",
        f"-A FORWARD -o {GAME_LINKS} -j DROP",
        f"-A OUTPUT -o {GAME_LINKS} -j DROP",
    ],
}


# The node's own settings. `route_localnet` for all interfaces would let an adjacent host reach
# the node's loopback services (CVE-2020-8558): it is on only for the games' links (`seal_link`).
NODE_SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    "net/ipv4/conf/all/route_localnet": "0",
}
SYSCTL_ROOT = Path("/proc/sys")


def seal_link(link: str) -> None:
    """The node's end of a game's pair: no IPv6 on it (the kernel drops what arrives), the
    node's loopback forwarded through it to players' games, and only the game's own addresses
    as sources (strict reverse path: a game cannot send as another)."""
    if (SYSCTL_ROOT / "net/ipv6/conf" / link).exists():
        (SYSCTL_ROOT / "net/ipv6/conf" / link / "disable_ipv6").write_text("1")
    (SYSCTL_ROOT / "net/ipv4/conf" / link / "route_localnet").write_text("1")
    (SYSCTL_ROOT / "net/ipv4/conf" / link / "rp_filter").write_text("1")


def forwarding_rules(game_address: str, port: int) -> list[str]:
    """A game's rules in GSHOST-DNAT, as iptables-save writes them (without -A/-D)."""
    return [
        f"GSHOST-DNAT -p {protocol} -m {protocol} --dport {port} "
        f"-j DNAT --to-destination {game_address}:{port}"
        for protocol in ("tcp", "udp")
    ]


def restore_v4(table: str, present: str) -> str | None:
    """The `iptables-restore --noflush` input that brings `table` (its `iptables -S` output
    `present`) to our IPv4 rules; None when it holds them already."""
    return _restore(
        table,
        present,
        own_chains=OWN_CHAINS_V4.get(table, {}),
        game_chains=GAME_CHAINS_V4.get(table, []),
        hooks=HOOKS_V4.get(table, []),
        legacy=LEGACY_V4.get(table, []),
    )


def restore_v6(table: str, present: str) -> str | None:
    """As `restore_v4`, for `ip6tables`."""
    return _restore(table, present, own_chains={}, game_chains=[], hooks=HOOKS_V6.get(table, []))


def _restore(
    table: str,
    present: str,
    *,
    own_chains: dict[str, list[str]],
    game_chains: list[str],
    hooks: list[str],
    legacy: Iterable[str] = (),
) -> str | None:
    lines = present.splitlines()
    held = set(lines)
    declare, body = [], []
    for chain, rules in own_chains.items():
        if [line for line in lines if line.startswith(f"-A {chain} ")] != rules:
            declare.append(f":{chain} - [0:0]")  # (re)made empty: restore flushes it
            body.extend(rules)
    declare.extend(f":{chain} - [0:0]" for chain in game_chains if f"-N {chain}" not in held)
    body.extend(_at_top(rule) for rule in reversed(hooks) if rule not in held)
    body.extend(rule.replace("-A ", "-D ", 1) for rule in legacy if rule in held)
    if not declare and not body:
        return None
    return "\n".join([f"*{table}", *declare, *body, "COMMIT"]) + "\n"


def _at_top(rule: str) -> str:
    """`-A CHAIN rest` as `-I CHAIN 1 rest`."""
    _, chain, rest = rule.split(" ", 2)
    return f"-I {chain} 1 {rest}"
