"""The audit purge at volume: rows written at the load test's call rate for a while, the 24 h
purge running meanwhile; the table must stay bounded and nothing may wait long on it.

Time is not compressed: the table starts with the rows of the last 24 h that the soak will
see expire (a band as old as the soak is long, just past 24 h old, at the call rate) and a
body of younger rows; then every second adds the call rate's worth of new rows through the
audit buffer (COPY, as the web replicas write them) while the purge runs every
--purge-every seconds. Reported: the row count over time (bounded: the band's rows go as
new ones come), the purge's statements (each batch a short transaction), and the writers'
flush times (a long lock would show there).

    .venv/bin/python bench/load/audit_soak.py [--minutes 30] [--rate R] [--purge-every 60]
        [--body-rows 500000]

--rate defaults to the aggregated request rate of the last load test (bench/results/load.json)
or 100/s. Uses a database of its own (LOAD_AUDIT_DATABASE_URL).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
DATABASE_URL = os.environ.get(
    "LOAD_AUDIT_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gshost_bench_audit"
)
RESULTS = ROOT / "bench" / "results"
FLUSH_SECONDS = 0.25  # the audit buffer's interval in the web replicas
PREFILL_CHUNK = 20_000


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=0.0, help="rows per second")
    parser.add_argument("--purge-every", type=float, default=60.0)
    parser.add_argument("--body-rows", type=int, default=500_000)
    parser.add_argument(
        "--backlog-minutes",
        type=float,
        default=0.0,
        help="rows already expired at the start, as if the purge last ran this long ago "
        "(60: the first purge does what the hourly schedule does)",
    )
    return parser.parse_args()


def load_test_rate() -> float:
    try:
        report = json.loads((RESULTS / "load.json").read_text())
        return float(report["phases"]["2 web + 2 workers"]["routes"]["Aggregated"]["rps"])
    except (OSError, KeyError, ValueError):
        return 100.0


def setup(env: dict[str, str]) -> None:
    name = DATABASE_URL.rsplit("/", 1)[1]
    with psycopg.connect(DATABASE_URL.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "--verbosity", "0"],
        cwd=ROOT, env=env, check=True,
    )  # fmt: skip
    os.environ.update(env)
    import django

    django.setup()


def row(organization_id: str, at: Any, number: int) -> dict[str, Any]:
    return {
        "organization_id": organization_id,
        "occurred_at": at,
        "source": "api",
        "actor_type": "api_key",
        "actor_key_id": f"k{number % 1000:07d}",
        "method": "GET",
        "path": "/api/public/v1/servers",
        "action": "servers.list",
        "status_code": 200,
        "ip": "198.51.100.7",
        "user_agent": "locust",
        "request_id": f"{number:032x}",
    }


def prefill(
    organization_id: str, rate: float, seconds: float, body_rows: int, backlog: float
) -> int:
    """The backlog (already expired), the band that expires during the soak, then the body
    of younger rows."""
    from django.utils import timezone

    from audit.buffer import audit_buffer

    now = timezone.now()
    oldest = now - timedelta(hours=24, seconds=5 + backlog)
    band = int(rate * (seconds + backlog))
    youngest = now - timedelta(minutes=1)
    body_start = oldest + timedelta(seconds=seconds + backlog)
    body_span = (youngest - body_start).total_seconds()
    moments = [oldest + timedelta(seconds=i / rate) for i in range(band)]
    moments += [
        body_start + timedelta(seconds=body_span * i / max(1, body_rows)) for i in range(body_rows)
    ]
    for start in range(0, len(moments), PREFILL_CHUNK):
        for number, at in enumerate(moments[start : start + PREFILL_CHUNK], start):
            audit_buffer.add(row(organization_id, at, number))
        audit_buffer.flush()
    return len(moments)


class Soak:
    def __init__(self, organization_id: str, rate: float, purge_every: float) -> None:
        self.organization_id, self.rate, self.purge_every = organization_id, rate, purge_every
        self.stop = threading.Event()
        self.flushes: list[float] = []
        self.purges: list[dict[str, float]] = []
        self.deletes_ms: list[float] = []
        self.samples: list[dict[str, float]] = []
        self.written = 0

    def writer(self) -> None:
        from django.db import connection
        from django.utils import timezone

        from audit.buffer import audit_buffer

        per_flush, carry, number = self.rate * FLUSH_SECONDS, 0.0, 10**9
        next_at = time.monotonic()
        while not self.stop.is_set():
            carry += per_flush
            for _ in range(int(carry)):
                number += 1
                audit_buffer.add(row(self.organization_id, timezone.now(), number))
            carry -= int(carry)
            started = time.monotonic()
            self.written += audit_buffer.flush()
            self.flushes.append((time.monotonic() - started) * 1000)
            next_at += FLUSH_SECONDS
            time.sleep(max(0.0, next_at - time.monotonic()))
        connection.close()

    def purger(self) -> None:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from audit.services import audit_purge_expired

        while not self.stop.wait(self.purge_every):
            started = time.monotonic()
            with CaptureQueriesContext(connection) as queries:
                deleted = audit_purge_expired()
            took = time.monotonic() - started
            self.deletes_ms += [
                float(q["time"]) * 1000
                for q in queries.captured_queries
                if q["sql"].startswith("DELETE")
            ]
            self.purges.append({"deleted": deleted, "seconds": took})
        connection.close()

    def sampler(self, started: float) -> None:
        with psycopg.connect(DATABASE_URL, autocommit=True) as connection:
            while not self.stop.wait(10):
                rows, size, expired = connection.execute(
                    "SELECT count(*), pg_total_relation_size('audit_auditrecord'), "
                    "count(*) FILTER (WHERE occurred_at < now() - interval '24 hours') "
                    "FROM audit_auditrecord"
                ).fetchone()  # type: ignore[misc]
                waiting = connection.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                ).fetchone()[0]  # type: ignore[index]
                self.samples.append(
                    {
                        "t": time.monotonic() - started,
                        "rows": rows,
                        "bytes": size,
                        "expired": expired,
                        "lock_waiters": waiting,
                    }
                )


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> int:
    opts = options()
    rate = opts.rate or load_test_rate()
    seconds = opts.minutes * 60
    env = {
        "DJANGO_SETTINGS_MODULE": "gshost.settings",
        "DATABASE_URL": DATABASE_URL,
        "SECRET_KEY": "audit-soak-secret-key-not-for-production",
        "DEBUG": "false",
        "REDIS_URL": "",
        "AUDIT_FLUSH_INTERVAL_SECONDS": "3600",  # the soak flushes itself, and times it
    }
    setup(env)
    from accounts.services import organization_create

    organization_id = organization_create(slug="soak", name="Soak").id
    band = f"{rate:.0f} rows/s x {seconds:.0f} s about to expire"
    print(f"prefilling: {band} + {opts.body_rows} younger rows")
    backlog = opts.backlog_minutes * 60
    prefilled = prefill(organization_id, rate, seconds, opts.body_rows, backlog)
    soak = Soak(organization_id, rate, opts.purge_every)
    started = time.monotonic()
    threads = [
        threading.Thread(target=soak.writer),
        threading.Thread(target=soak.purger),
        threading.Thread(target=soak.sampler, args=(started,)),
    ]
    for thread in threads:
        thread.start()
    print(f"soaking {opts.minutes:g} min at {rate:.0f} rows/s, purge every {opts.purge_every:g} s")
    try:
        time.sleep(seconds)
    finally:
        soak.stop.set()
        for thread in threads:
            thread.join()
    rows = [s["rows"] for s in soak.samples]
    result = {
        "minutes": opts.minutes,
        "backlog_minutes": opts.backlog_minutes,
        "purge_every_seconds": opts.purge_every,
        "rate_rows_per_second": rate,
        "prefilled_rows": prefilled,
        "written_rows": soak.written,
        "rows_first_min_max_last": [rows[0], min(rows), max(rows), rows[-1]] if rows else [],
        "bytes_first_last": [soak.samples[0]["bytes"], soak.samples[-1]["bytes"]] if rows else [],
        "expired_rows_max": max((s["expired"] for s in soak.samples), default=0),
        "lock_waiters_max": max((s["lock_waiters"] for s in soak.samples), default=0),
        "purge_runs": len(soak.purges),
        "purged_rows": sum(p["deleted"] for p in soak.purges),
        "purge_run_seconds_max": max((p["seconds"] for p in soak.purges), default=0.0),
        "delete_statements": len(soak.deletes_ms),
        "delete_statement_ms_p50_max": [
            statistics.median(soak.deletes_ms) if soak.deletes_ms else 0.0,
            max(soak.deletes_ms, default=0.0),
        ],
        "flush_ms_p50_p99_max": [
            percentile(soak.flushes, 0.5),
            percentile(soak.flushes, 0.99),
            max(soak.flushes, default=0.0),
        ],
        "load_average": os.getloadavg()[0],
        "samples": soak.samples,
    }
    RESULTS.mkdir(exist_ok=True)
    name = f"audit_soak-{opts.minutes:g}min-backlog{opts.backlog_minutes:g}min.json"
    (RESULTS / name).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
