"""Prometheus metrics in prometheus-client's multi-process mode.

Every process of the service (gunicorn's workers, the delivery workers) writes its samples to
files in ``PROMETHEUS_MULTIPROC_DIR`` (settings put it in the environment before this module
loads); ``/metrics`` adds them up at scrape time. Only counters and histograms are kept per
process; the due-but-unsent backlog is read from the database at each scrape instead.

A process that is gone leaves its counts behind, as Prometheus expects totals never to go
backwards: at each scrape (and when gunicorn reaps a worker) the files of processes that no
longer run are added into one file per kind (``counter_gone.db``, ``histogram_gone.db``) and
removed, so the directory holds one file per running process and two more, however often
processes start. Liveness is judged by process id, so the directory belongs to one machine
(one PID namespace).

Observations are cheap on purpose (they run on every request and every attempt): the labelled
children are looked up once and kept in small dictionaries.
"""

from __future__ import annotations

import fcntl
import glob
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Fine around the 50 ms the engine aims for, since this is the crash re-send window.
RECORD_DELAY_BUCKETS: Final = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 10.0)
LAG_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)

HTTP_REQUESTS: Final = Counter(
    "gshost_http_requests",
    "HTTP requests answered, by route (the URL pattern's name), method and status.",
    ["route", "method", "status"],
)
HTTP_LATENCY: Final = Histogram(
    "gshost_http_request_duration_seconds",
    "Time from the request reaching Django to the response leaving it, by route.",
    ["route"],
    buckets=LATENCY_BUCKETS,
)
AUTH_FAILURES: Final = Counter(
    "gshost_api_auth_failures",
    "Public API calls refused with 401, by error code (missing_token, invalid_token, ...).",
    ["code"],
)
WEBHOOK_ATTEMPTS: Final = Counter(
    "gshost_webhook_attempts",
    "Delivery attempts made, by trigger and outcome (success, http_<status class>, or error).",
    ["trigger", "outcome"],
)
WEBHOOK_DELIVERIES: Final = Counter(
    "gshost_webhook_deliveries_settled",
    "Deliveries that reached a final state, by status (success, failed).",
    ["status"],
)
HANDOFFS_FAILED: Final = Counter(
    "gshost_handoffs_failed",
    "Tasks that could not be queued after commit (the broker unreachable), by task; the rows "
    "they named are picked up without them.",
    ["task"],
)
WEBHOOK_FIRST_ATTEMPT_LAG: Final = Histogram(
    "gshost_webhook_first_attempt_lag_seconds",
    "From a delivery's creation (its first due time) to the start of its first attempt.",
    buckets=LAG_BUCKETS,
)
WEBHOOK_RECORD_DELAY: Final = Histogram(
    "gshost_webhook_record_delay_seconds",
    "From the end of an attempt to the commit that recorded it, for the oldest attempt of each "
    "recorded batch: what a worker killed at that moment would have sent again.",
    buckets=RECORD_DELAY_BUCKETS,
)

# Collectors that compute a value at scrape time (from the database), registered by apps.
_scrape_collectors: list[Callable[[], Collector]] = []
_lock = threading.Lock()


def register_scrape_collector(factory: Callable[[], Collector]) -> None:
    with _lock:
        if factory not in _scrape_collectors:
            _scrape_collectors.append(factory)


class _ProcessFilesCollector(multiprocess.MultiProcessCollector):
    """prometheus-client's collector, passing over empty files: a process killed between
    creating its file and sizing it (SIGKILL, the OOM killer) leaves one, which holds no
    samples and which the stock collector fails on, at every scrape, until it is removed."""

    def collect(self) -> Iterable[Metric]:
        files = glob.glob(os.path.join(self._path, "*.db"))
        return self.merge([path for path in files if _has_content(path)], accumulate=True)


def _has_content(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False  # removed meanwhile (mark_process_dead)


_PROCESS_FILE = re.compile(r"(counter|histogram)_(\d+)\.db")


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def fold_gone_processes(directory: str | None = None) -> int:
    """Add the samples of processes that no longer run into the kind's ``*_gone.db`` file and
    remove their files; how many files were folded. One folder at a time (a file lock)."""
    directory = directory or metrics_dir()
    folded = 0
    with open(os.path.join(directory, ".fold.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for path in sorted(glob.glob(os.path.join(directory, "*.db"))):
            match = _PROCESS_FILE.fullmatch(os.path.basename(path))
            if match is None or _running(int(match.group(2))):
                continue
            try:
                _fold(path, os.path.join(directory, f"{match.group(1)}_gone.db"))
            except OSError:  # removed meanwhile, or unreadable: the next scrape tries again
                logger.warning("Could not fold the metrics file %s", path, exc_info=True)
                continue
            folded += 1
    return folded


def _fold(path: str, into: str) -> None:
    if _has_content(path):
        totals = MmapedDict(into)
        try:
            for key, value, timestamp, _ in MmapedDict.read_all_values_from_file(path):
                total, _ = totals.read_value(key)
                totals.write_value(key, total + value, timestamp)
        finally:
            totals.close()
    os.remove(path)


def render() -> bytes:
    """Every process's samples added up, plus the scrape-time collectors, in text format."""
    fold_gone_processes()
    registry = CollectorRegistry()
    _ProcessFilesCollector(registry)
    for factory in list(_scrape_collectors):
        registry.register(factory())
    return generate_latest(registry)


def metrics_dir() -> str:
    return os.environ["PROMETHEUS_MULTIPROC_DIR"]


def mark_process_dead(pid: int) -> None:
    """For gunicorn's ``child_exit`` hook: drop the files a dead worker keeps only while alive.

    Its counters and histograms are folded into the ``*_gone.db`` files, so totals never go
    backwards.
    """
    multiprocess.mark_process_dead(pid, metrics_dir())
    fold_gone_processes()
