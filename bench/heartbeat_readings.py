"""Benchmark: what a heartbeat's games, capacity and readings add to its handling, in-process.

One agent node with BENCH_SERVERS servers; `POST /internal/nodes/heartbeat` through Django's
test client (the whole view: token, parsing, the UPDATE, the readings kept in the cache),
three bodies interleaved, BENCH_BEATS of each:

1. baseline: `agent_version`, `outbox_id`, `servers` (what every heartbeat carried before);
2. with `games` and `capacity`;
3. with `games`, `capacity` and the `readings` of every server (each running, 5 players, its
   settings file);
4. the same with each reading's completed minute (`minutes`), which one heartbeat in six
   carries: a new minute each round, so each is stored (one SELECT and one INSERT).

Prints p50 and p99 (µs) of each and their ratio to the baseline. The database is a throw-away
SQLite file unless DATABASE_URL is set; the cache is the process's own unless REDIS_URL is.

    python bench/heartbeat_readings.py      # BENCH_SERVERS (40), BENCH_BEATS (2000)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVERS = int(os.environ.get("BENCH_SERVERS", "40"))
BEATS = int(os.environ.get("BENCH_BEATS", "2000"))
_TMP = tempfile.mkdtemp(prefix="bench-heartbeat-")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gshost.settings")
os.environ.setdefault("DATABASE_URL", f"sqlite:///{_TMP}/bench.sqlite3")
os.environ.setdefault("SECRET_KEY", "bench-secret-key-not-for-production")
os.environ.setdefault("LOG_LEVEL", "WARNING")
sys.path.insert(0, str(ROOT))


def bodies(server_ids: list[str]) -> dict[str, bytes]:
    base = {
        "agent_version": "bench",
        "outbox_id": "obx_bench",
        "servers": dict.fromkeys(server_ids, "running"),
    }
    offer = {
        "games": ["demo", "freeciv"],
        "capacity": {"memory_mb": 32000, "disk_mb": 500000, "cpu_percent": 800},
    }
    reading = {
        "state": "running", "sampled_at": "2026-11-27T10:00:00Z", "cpu_percent": 3.5,
        "memory_mb": 40, "memory_limit_mb": 1024, "disk_mb": 2, "network_in_kbps": None,
        "network_out_kbps": None, "players_online": 5, "uptime_seconds": 600,
        "players": [{"name": f"player{n}", "joined_at": "2026-11-27T09:50:00Z"} for n in range(5)],
        "max_players": 20,
        "settings": {"motd": "A gshost demo server", "max-players": "20", "difficulty": "normal"},
    }  # fmt: skip
    readings = {"readings": dict.fromkeys(server_ids, reading)}
    return {
        "baseline": json.dumps(base).encode(),
        "games and capacity": json.dumps({**base, **offer}).encode(),
        "with readings": json.dumps({**base, **offer, **readings}).encode(),
    }


def with_minute(server_ids: list[str], body: bytes, minute: datetime) -> bytes:
    """`body` (with readings) with each server's reading carrying the completed `minute`."""
    decoded = json.loads(body)
    sent = {
        "at": minute.isoformat().replace("+00:00", "Z"),
        "cpu_percent": 3.5, "memory_mb": 40.0, "players_online": 5,
    }  # fmt: skip
    decoded["readings"] = {
        server_id: {**reading, "minutes": [sent]}
        for server_id, reading in decoded["readings"].items()
    }
    return json.dumps(decoded).encode()


def main() -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from django.utils import timezone

    from accounts.services import organization_create
    from audit.actors import Actor
    from servers.fleet.nodes import NodeInput, node_create
    from servers.models import Node
    from servers.services import server_create

    call_command("migrate", verbosity=0)
    organization = organization_create(slug="bench", name="Bench")
    made = node_create(
        data=NodeInput(
            name="bench",
            url="https://127.0.0.1:8444",
            address="127.0.0.1",
            ports="20000-29999",
            memory_mb=10**7,
            disk_mb=10**9,
        )
    )
    Node.objects.filter(id=made.node.id).update(games=["demo"], last_heartbeat_at=timezone.now())
    made.node.refresh_from_db()
    server_ids = [
        server_create(
            actor=Actor.system("bench"),
            organization=organization,
            name=f"s{n}",
            game="demo",
            node=made.node,
        ).id
        for n in range(SERVERS)
    ]
    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {made.token}"}
    kinds = bodies(server_ids)
    first_minute = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=23)
    taken: dict[str, list[float]] = {kind: [] for kind in [*kinds, "with minutes"]}
    for round_ in range(BEATS + 50):  # the first 50 rounds warm up
        # A minute not stored yet (within the 23 h back; more rounds than that repeat some).
        minute = first_minute + timedelta(minutes=round_ % (23 * 60))
        sent = {**kinds, "with minutes": with_minute(server_ids, kinds["with readings"], minute)}
        for kind, body in sent.items():
            started = time.perf_counter()
            response = client.post(
                "/internal/nodes/heartbeat", body, content_type="application/json", **headers
            )
            elapsed = (time.perf_counter() - started) * 1e6
            assert response.status_code == 200, response.content
            if round_ >= 50:
                taken[kind].append(elapsed)
    base = statistics.median(taken["baseline"])
    print(f"{SERVERS} servers, {BEATS} heartbeats of each kind, interleaved")
    for kind, values in taken.items():
        values.sort()
        p50, p99 = statistics.median(values), values[int(len(values) * 0.99) - 1]
        print(f"{kind:20} p50 {p50:8.0f} µs  p99 {p99:8.0f} µs  p50 x{p50 / base:.2f}")
    body_size = len(kinds["with readings"])
    print(f"heartbeat body with readings: {body_size:,} bytes")


if __name__ == "__main__":
    main()
