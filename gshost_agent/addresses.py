"""Which addresses and names are public: the rules webhook deliveries (webhooks.targets) and
the agent's pulls of customers' URLs (gshost_agent.files.pull) both apply, to every address
they connect to. Standard library only: the control plane and the agent share it.
"""

from __future__ import annotations

import ipaddress
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Names under these suffixes (or equal to them) never reach a public server. Single-label
# names ("intranet", "com") are refused separately.
NON_PUBLIC_SUFFIXES: Final[frozenset[str]] = frozenset(
    {
        "localhost",  # RFC 6761
        "internal",  # ICANN private-use TLD; metadata.google.internal
        "local",  # mDNS, RFC 6762
        "localdomain",
        "home.arpa",  # RFC 8375
        "invalid",  # RFC 6761
        "test",  # RFC 6761
        "lan",
        "intranet",
        "corp",
        "private",
    }
)

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# Explicit lists, because ipaddress.is_global is true for multicast, for the NAT64 and 6to4
# forms, and its answers differ between Python patch releases.
NON_PUBLIC_IPV4_NETWORKS: Final[tuple[ipaddress.IPv4Network, ...]] = (
    _V4("0.0.0.0/8"),  # "this network"
    _V4("10.0.0.0/8"),  # private
    _V4("100.64.0.0/10"),  # CGNAT shared space (also Alibaba metadata 100.100.100.200)
    _V4("127.0.0.0/8"),  # loopback
    _V4("169.254.0.0/16"),  # link-local, cloud metadata 169.254.169.254
    _V4("172.16.0.0/12"),  # private
    _V4("192.0.0.0/24"),  # IETF protocol assignments (Oracle metadata 192.0.0.192)
    _V4("192.0.2.0/24"),  # documentation TEST-NET-1
    _V4("192.88.99.0/24"),  # deprecated 6to4 relay anycast
    _V4("192.168.0.0/16"),  # private
    _V4("198.18.0.0/15"),  # benchmarking
    _V4("198.51.100.0/24"),  # documentation TEST-NET-2
    _V4("203.0.113.0/24"),  # documentation TEST-NET-3
    _V4("224.0.0.0/4"),  # multicast
    _V4("240.0.0.0/4"),  # reserved, including broadcast 255.255.255.255
)

# Only 2000::/3 is global unicast; these are the non-public blocks inside it, plus the
# well-known ones outside it listed for documentation (they are refused either way).
NON_PUBLIC_IPV6_NETWORKS: Final[tuple[ipaddress.IPv6Network, ...]] = (
    _V6("::/96"),  # unspecified, loopback, deprecated IPv4-compatible ::a.b.c.d
    _V6("::ffff:0:0:0/96"),  # SIIT IPv4-translated
    _V6("64:ff9b:1::/48"),  # local-use NAT64
    _V6("100::/64"),  # discard-only
    _V6("2001::/23"),  # IETF assignments: Teredo, benchmarking 2001:2::/48, ORCHID
    _V6("2001:db8::/32"),  # documentation
    _V6("3fff::/20"),  # documentation (RFC 9637)
    _V6("5f00::/16"),  # SRv6 SIDs
    _V6("fc00::/7"),  # unique local, incl. AWS metadata fd00:ec2::254
    _V6("fe80::/10"),  # link-local
    _V6("fec0::/10"),  # deprecated site-local
    _V6("ff00::/8"),  # multicast
)

_GLOBAL_UNICAST_V6: Final = _V6("2000::/3")
_NAT64_WELL_KNOWN: Final = _V6("64:ff9b::/96")


def is_public_ip(ip: IPAddress) -> bool:
    """True when ``ip`` is a globally reachable unicast address (embedded IPv4 included)."""
    if isinstance(ip, ipaddress.IPv4Address):
        return _is_public_ipv4(ip)
    embedded = _embedded_ipv4(ip)
    if embedded is not None:
        return _is_public_ipv4(embedded)
    return _is_public_ipv6(ip)


def _is_public_ipv4(ip: ipaddress.IPv4Address) -> bool:
    if any(ip in network for network in NON_PUBLIC_IPV4_NETWORKS):
        return False
    return ip.is_global and not ip.is_multicast


def _is_public_ipv6(ip: ipaddress.IPv6Address) -> bool:
    if ip not in _GLOBAL_UNICAST_V6:
        return False
    if any(ip in network for network in NON_PUBLIC_IPV6_NETWORKS):
        return False
    return ip.is_global and not ip.is_multicast


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a mapped (::ffff:0:0/96), NAT64 (64:ff9b::/96) or 6to4 form reaches."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64_WELL_KNOWN:
        return ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)
    return ip.sixtofour


def is_public_name(name: str) -> bool:
    """False for a single-label name or one under a non-public suffix (`localhost`, `lan`)."""
    labels = name.lower().rstrip(".").split(".")
    suffixes = {".".join(labels[index:]) for index in range(len(labels))}
    return len(labels) >= 2 and not suffixes & NON_PUBLIC_SUFFIXES
