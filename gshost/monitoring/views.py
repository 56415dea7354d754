"""Operating the service: the readiness probe and the Prometheus scrape.

Both sit outside the API prefix: unauthenticated, not audited, not rate limited.
"""

from __future__ import annotations

import ipaddress
import logging
from functools import cache

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from gshost import process_state
from gshost.api.client_ip import client_ip
from gshost.monitoring import metrics

logger = logging.getLogger(__name__)
PROBE_TIMEOUT_SECONDS = 2.0


def _database_ready() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone() == (1,)
    except Exception:
        logger.warning("Readiness: the database cannot be reached", exc_info=True)
        return False


@cache
def _redis_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url, socket_connect_timeout=PROBE_TIMEOUT_SECONDS, socket_timeout=PROBE_TIMEOUT_SECONDS
    )


def _redis_ready() -> bool | None:
    """None when no Redis is configured (the embedded default)."""
    if not settings.REDIS_URL:
        return None
    try:
        return bool(_redis_client(settings.REDIS_URL).ping())
    except Exception:
        logger.warning("Readiness: Redis cannot be reached", exc_info=True)
        return False


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """200 when the database and (if configured) Redis answer; 503 otherwise."""
    database, cache_broker = _database_ready(), _redis_ready()
    checks = {
        "database": "ok" if database else "unavailable",
        "redis": {None: "not_configured", True: "ok", False: "unavailable"}[cache_broker],
    }
    ready = database and cache_broker is not False
    body = {"status": "ready" if ready else "unavailable", "checks": checks}
    return JsonResponse(body, status=200 if ready else 503)


@cache
def _allowed_networks(
    networks: tuple[str, ...],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(network.strip(), strict=False) for network in networks)


def metrics_allowed(request: HttpRequest) -> bool:
    address = client_ip(request)
    if address is None:
        return False
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # a dual-stack listener reports IPv4 callers this way
    allowed = _allowed_networks(tuple(settings.METRICS_ALLOWED_NETWORKS))
    return any(ip in network for network in allowed)


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text format, only to METRICS_ALLOWED_NETWORKS; 404 to everyone else, so
    the endpoint's existence is not advertised."""
    if not settings.METRICS_ENABLED or not metrics_allowed(request):
        return HttpResponse("Not found.\n", status=404, content_type="text/plain")
    return HttpResponse(metrics.render(), content_type=CONTENT_TYPE_LATEST)


def _forget_clients() -> None:
    _redis_client.cache_clear()
    _allowed_networks.cache_clear()


process_state.register(
    "gshost.monitoring.views",
    bound="one Redis client per REDIS_URL and one network list per METRICS_ALLOWED_NETWORKS "
    "in use: one each",
    reset=_forget_clients,
)
