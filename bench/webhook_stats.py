"""Benchmark: GET /webhooks/{id}/stats on PostgreSQL with a week of busy history.

Loads 7 days x 100,000 deliveries a day (BENCH_DELIVERIES_PER_DAY) for ONE webhook - the
worst case, every delivery belongs to the endpoint asked about - into a fresh database, plus
the same again spread over four other webhooks, and the hourly outcome counts the engine would
have kept for them (computed here in SQL with the same buckets as ``webhooks.health.rollup``). Then
calls the route in-process (Django's test client, with authentication, rate limiting and
audit) and prints p50/p95 per window against the 50 ms target, and the plan of the count of
open deliveries, the one query that reads delivery rows.
"""

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "gshost_bench_stats"
PER_DAY = int(os.environ.get("BENCH_DELIVERIES_PER_DAY", "100000"))
DAYS = 7
CALLS = int(os.environ.get("BENCH_CALLS", "60"))
TARGET_MS = 50.0
WINDOWS = ("1h", "24h", "48h", "7d")

os.environ.update(
    {
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
        "REDIS_URL": "",
        "DJANGO_SETTINGS_MODULE": "gshost.settings",
        "SECRET_KEY": "bench-secret-key-not-for-production",
        "DEBUG": "false",  # whatever the checkout's .env (make run's) says
        "API_RATE_DEFAULT": "100000000/min",
        "LOG_LEVEL": "WARNING",
        "AUDIT_FLUSH_INTERVAL_SECONDS": "0",
    }
)
sys.path.insert(0, str(ROOT))

# The deliveries: statuses ~97 % success, 2 % failed, 1 % waiting; the first attempt starts
# 0-2 s after creation and succeeds 50-800 ms later.
LOAD_SQL = """
INSERT INTO webhooks_delivery (id, webhook_id, organization_id, event, server_id, body, status,
    created_at, next_attempt_at, automatic_attempts, last_error, first_attempt_at, completed_at)
SELECT 'dlv_' || %(tag)s || n, %(webhook)s, %(org)s, 'server.crashed', 'srv_bench',
    '{"event":"server.crashed"}', s.status, c.created,
    CASE WHEN s.status = 'retry_scheduled' THEN c.created + interval '5 minutes' END,
    1, CASE WHEN s.status = 'failed' THEN 'status_503' ELSE '' END,
    c.created + (random() * interval '2 seconds'),
    CASE WHEN s.status = 'success'
        THEN c.created + interval '2 seconds' + (random() * interval '800 milliseconds') END
FROM generate_series(1, %(count)s) AS n,
LATERAL (SELECT now() - (n::float / %(count)s) * interval '7 days' AS created) AS c,
LATERAL (SELECT CASE WHEN n %% 100 < 97 THEN 'success' WHEN n %% 100 < 99 THEN 'failed'
                     ELSE 'retry_scheduled' END AS status) AS s
"""

# What the engine keeps as it settles deliveries (webhooks.health.rollup): counts per webhook, hour
# of creation, outcome and logarithmic latency bucket (1.05x wide, 0 for failures).
ROLLUP_SQL = """
INSERT INTO webhooks_deliveryoutcomecount (webhook_id, hour, outcome, latency_bucket, count)
SELECT webhook_id, date_trunc('hour', created_at), status,
    CASE WHEN status = 'success' THEN LEAST(400, GREATEST(0, ceil(
        ln(GREATEST(EXTRACT(EPOCH FROM completed_at - first_attempt_at) * 1000, 1)) / ln(1.05)
        - 1e-9)))::int ELSE 0 END,
    count(*)
FROM webhooks_delivery WHERE status IN ('success', 'failed')
GROUP BY 1, 2, 3, 4
"""


def prepare_database() -> None:
    for sql in (f"DROP DATABASE IF EXISTS {DB_NAME}", f"CREATE DATABASE {DB_NAME}"):
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", sql], check=True)
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)


def load(organization_id: str, webhook_ids: list[str]) -> None:
    from django.db import connection

    busy, others = webhook_ids[0], webhook_ids[1:]
    started = time.perf_counter()
    with connection.cursor() as cursor:
        params = {"tag": "busy", "webhook": busy, "org": organization_id, "count": PER_DAY * DAYS}
        cursor.execute(LOAD_SQL, params)
        share = PER_DAY * DAYS // len(others)
        for index, other in enumerate(others):
            tag = f"o{index}x"
            cursor.execute(
                LOAD_SQL, {"tag": tag, "webhook": other, "org": organization_id, "count": share}
            )
        cursor.execute(ROLLUP_SQL)
        cursor.execute("VACUUM ANALYZE webhooks_delivery")
        cursor.execute("VACUUM ANALYZE webhooks_deliveryoutcomecount")
    print(f"loaded {2 * PER_DAY * DAYS:,} deliveries in {time.perf_counter() - started:.1f} s")


def main() -> None:
    import django

    django.setup()
    prepare_database()
    from django.db import connection
    from rest_framework.test import APIClient

    from accounts.services import api_key_create, member_add, organization_create
    from audit.actors import Actor
    from audit.services import PanelContext
    from webhooks.services import webhook_create

    org = organization_create(slug="bench", name="Bench")
    owner = member_add(organization=org, email="bench@example.com", password="x", owner=True)
    key = api_key_create(
        membership=owner,
        name="bench",
        scopes=["webhooks:read"],
        actor=Actor.person(PanelContext(user_email="bench@example.com")),
    )
    hooks = [
        webhook_create(
            organization=org,
            url=f"https://hooks{i}.example.com/",
            events=["server.crashed"],
            actor=Actor.system("bench"),
        )[0].id
        for i in range(5)
    ]
    load(org.id, hooks)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key.full_key}")
    url = f"/api/public/v1/webhooks/{hooks[0]}/stats"
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM webhooks_deliveryoutcomecount")
        print(f"outcome count rows: {cursor.fetchone()[0]:,}")
        cursor.execute(
            "EXPLAIN SELECT count(*) FROM webhooks_delivery WHERE webhook_id = %s "
            "AND status IN ('pending', 'retry_scheduled') "
            "AND created_at >= now() - interval '7 days'",
            [hooks[0]],
        )
        print("plan (open deliveries):\n  " + "\n  ".join(row[0] for row in cursor.fetchall()))
    print(f"{'window':>6} {'deliveries':>10} {'p50 ms':>8} {'p95 ms':>8}  target p95 < {TARGET_MS}")
    for window in WINDOWS:
        response = client.get(url, {"window": window})
        assert response.status_code == 200, response.content
        timings = []
        for _ in range(CALLS):
            started = time.perf_counter()
            client.get(url, {"window": window})
            timings.append((time.perf_counter() - started) * 1000)
        p50 = statistics.median(timings)
        p95 = statistics.quantiles(timings, n=20)[18]
        verdict = "ok" if p95 < TARGET_MS else "OVER"
        print(f"{window:>6} {response.json()['deliveries']:>10,} {p50:8.1f} {p95:8.1f}  {verdict}")


if __name__ == "__main__":
    main()
