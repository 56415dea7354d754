"""Request metrics: count and time every request by route and status; count failed API
authentications. Outermost middleware, so its time covers all the others."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import MiddlewareNotUsed
from django.http import HttpRequest, HttpResponse

from gshost import process_state
from gshost.monitoring.metrics import AUTH_FAILURES, HTTP_LATENCY, HTTP_REQUESTS

API_PREFIX = "/api/public/v1"
UNMATCHED = "unmatched"
# Label children, looked up once: the label lookup under prometheus-client's lock costs more
# than the observation. Bounded: routes x methods x statuses the service can answer.
_MAX_CHILDREN = 5000
_counters: dict[tuple[str, str, int], Any] = {}
_timers: dict[str, Any] = {}


def _counter(route: str, method: str, status: int) -> Any:
    key = (route, method, status)
    child = _counters.get(key)
    if child is None:
        child = HTTP_REQUESTS.labels(route, method, str(status))
        if len(_counters) < _MAX_CHILDREN:
            _counters[key] = child
    return child


def _timer(route: str) -> Any:
    child = _timers.get(route)
    if child is None:
        child = HTTP_LATENCY.labels(route)
        if len(_timers) < _MAX_CHILDREN:
            _timers[route] = child
    return child


def forget_children() -> None:
    _counters.clear()
    _timers.clear()


process_state.register(
    "gshost.monitoring.middleware",
    bound=f"at most {_MAX_CHILDREN:,} request counters and {_MAX_CHILDREN:,} timers "
    "(routes x methods x statuses); past that, looked up each time",
    reset=forget_children,
)


def route_of(request: HttpRequest) -> str:
    match = request.resolver_match
    if match is None or not match.url_name:
        return UNMATCHED
    return match.view_name


class RequestMetricsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        if not settings.METRICS_ENABLED:
            raise MiddlewareNotUsed
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        elapsed = time.perf_counter() - started
        route = route_of(request)
        method = request.method if request.method in _METHODS else "OTHER"
        _counter(route, method, response.status_code).inc()
        _timer(route).observe(elapsed)
        if response.status_code == 401 and request.path_info.startswith(API_PREFIX):
            AUTH_FAILURES.labels(getattr(request, "api_error_code", "") or "unknown").inc()
        return response


# Anything else is counted as OTHER, so a client cannot grow the label set.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
