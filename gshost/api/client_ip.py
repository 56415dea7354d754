"""The caller's address: REMOTE_ADDR, or X-Forwarded-For only when a trusted proxy sent it."""

import ipaddress
from functools import cache, lru_cache

from django.conf import settings
from django.http import HttpRequest

from gshost import process_state

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@cache
def _trusted_networks(proxies: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(p.strip(), strict=False) for p in proxies if p.strip())


def _is_trusted(address: str, networks: tuple[IPNetwork, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


@lru_cache(maxsize=4096)  # the same few addresses call again and again
def _valid(address: str) -> str | None:
    try:
        return str(ipaddress.ip_address(address.strip()))
    except ValueError:
        return None


def client_ip(request: HttpRequest) -> str | None:
    cached: str | None = getattr(request, "_client_ip", "unset")
    if cached != "unset":
        return cached
    remote = _valid(request.META.get("REMOTE_ADDR", ""))
    networks = _trusted_networks(tuple(settings.TRUSTED_PROXIES))
    address = remote
    if remote is not None and networks and _is_trusted(remote, networks):
        # Walk the chain from the nearest hop; the first untrusted address is the client.
        hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        for hop in reversed([h for h in hops if h]):
            address = _valid(hop)
            if address is None or not _is_trusted(address, networks):
                break
    request._client_ip = address  # type: ignore[attr-defined]
    return address


def _forget() -> None:
    _trusted_networks.cache_clear()
    _valid.cache_clear()


process_state.register(
    "gshost.api.client_ip",
    bound="at most 4,096 parsed addresses, least recently used dropped; one network list "
    "per TRUSTED_PROXIES in use",
    reset=_forget,
)
