"""Benchmark: what the request-metrics middleware adds to one request, in-process (µs).

Calls RequestMetricsMiddleware around a view that does nothing, against the same view called
directly, on a resolved API route, in multi-process mode (samples written to the mmap files),
and prints the difference per request. Set BENCH_REQUESTS to change the count.
"""

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "200000"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gshost.settings")
os.environ.setdefault("DATABASE_URL", "")
os.environ.setdefault("SECRET_KEY", "bench-secret-key-not-for-production")
os.environ.setdefault("DEBUG", "false")  # whatever the checkout's .env (make run's) says
sys.path.insert(0, str(ROOT))


def main() -> None:
    import django

    django.setup()
    from django.http import HttpRequest, HttpResponse
    from django.test import RequestFactory
    from django.urls import resolve

    from gshost.monitoring.middleware import RequestMetricsMiddleware

    response = HttpResponse(b"{}")

    def view(request: HttpRequest) -> HttpResponse:
        return response

    request = RequestFactory().get("/api/public/v1/webhooks/whk_0123456789abcdefABCD")
    request.resolver_match = resolve(request.path_info)
    middleware = RequestMetricsMiddleware(view)

    def timed(handler: object) -> float:
        call = handler.__call__  # type: ignore[attr-defined]
        started = time.perf_counter()
        for _ in range(REQUESTS):
            call(request)
        return (time.perf_counter() - started) / REQUESTS * 1e6

    for _ in range(2):  # warm up, then measure the better of three rounds
        timed(middleware)
    bare = min(timed(view) for _ in range(3))
    wrapped = min(timed(middleware) for _ in range(3))
    print(f"bare view            {bare:6.2f} µs/request")
    print(f"with request metrics {wrapped:6.2f} µs/request")
    print(f"metrics cost         {wrapped - bare:6.2f} µs/request ({REQUESTS:,} requests)")


if __name__ == "__main__":
    main()
