"""Benchmark: why claim and record are spelled twice (webhooks/delivery/claims.py, record.py).

On one PostgreSQL database, in the same run, each spelling claims and records the same work:

  - orm: the spelling SQLite uses (a claim in three ORM statements, a record in a transaction
    of four to five statements per attempt);
  - one statement: the spelling PostgreSQL uses (a claim in one ``UPDATE … SKIP LOCKED …
    RETURNING``, a record of the whole batch in one statement).

Each round publishes BENCH_ROWS pending deliveries (over 16 webhooks), then claims them
BENCH_BATCH at a time, by id as the engine does for published rows, and records a 200 answer
for each claimed batch; then the same with the due scan instead of ids. The spellings
alternate within each round. One thread, no network: the figures are each spelling's database
cost per delivery, which is what the engine's senders pay between two sends. Prints rows/s of
claim, record and both, and one statement over the ORM, per round and as the median.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = os.environ.get("BENCH_DB_NAME", "gshost_bench_spellings")
ROWS = int(os.environ.get("BENCH_ROWS", "3000"))
BATCH = int(os.environ.get("BENCH_BATCH", "16"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
WEBHOOKS = 16

os.environ.update(
    {
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
        "REDIS_URL": "",
        "DJANGO_SETTINGS_MODULE": "gshost.settings",
        "SECRET_KEY": "bench-secret-key-not-for-production",
        "LOG_LEVEL": "WARNING",
        "AUDIT_FLUSH_INTERVAL_SECONDS": "0",
    }
)
sys.path.insert(0, str(ROOT))


def prepare_database() -> None:
    for sql in (f"DROP DATABASE IF EXISTS {DB_NAME}", f"CREATE DATABASE {DB_NAME}"):
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", sql], check=True)
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)


def create_webhooks() -> str:
    from accounts.services import organization_create
    from audit.actors import Actor
    from webhooks.services import webhook_create

    organization = organization_create(slug="bench", name="Bench")
    for n in range(WEBHOOKS):
        webhook_create(
            organization=organization,
            url=f"https://hook-{n}.bench.example.com/in",
            events=["server.crashed"],
            actor=Actor.system("bench"),
        )
    return str(organization.id)


def publish(organization_id: str) -> list[str]:
    from django.db import transaction

    from webhooks.events import Event
    from webhooks.services import publish_event

    ids: list[str] = []
    with transaction.atomic():
        for _ in range(ROWS // WEBHOOKS):
            published = publish_event(
                organization_id=organization_id,
                server_id="srv_bench",
                server_name="Bench world",
                event=Event.SERVER_CRASHED,
                data={"exit_code": 137, "signal": "SIGKILL"},
            )
            ids += [delivery.id for delivery in published]
    return ids


def answered() -> Any:
    from webhooks.targets.transport import AttemptResult

    return AttemptResult(
        started_at=datetime.now(UTC),
        duration_ms=12,
        status_code=200,
        response_body="ok",
        request_headers={"Content-Type": "application/json"},
        response_headers={"Content-Length": "2"},
        error=None,
    )


def run_spelling(
    claim: Callable[..., list[Any]], write: Callable[[list[Any]], object], ids: list[str] | None
) -> tuple[float, float, int]:
    """Claim everything due BATCH at a time and record each batch: (claim s, record s, rows)."""
    from django.utils import timezone

    from webhooks.delivery.record import Finished, _next_state

    claiming = recording = 0.0
    rows = 0
    chunks = [ids[i : i + BATCH] for i in range(0, len(ids), BATCH)] if ids else None
    while True:
        began = time.perf_counter()
        if chunks is None:
            taken = claim(BATCH, (), None)
        else:
            taken = claim(BATCH, (), chunks.pop()) if chunks else []
        claimed = time.perf_counter()
        if not taken:
            return claiming, recording, rows
        now = timezone.now()
        changes = [
            (done, _next_state(done, now)) for c in taken for done in [Finished(c, answered())]
        ]
        write(changes)
        recording += time.perf_counter() - claimed
        claiming += claimed - began
        rows += len(taken)


def main() -> None:
    import django

    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min)")
    django.setup()
    prepare_database()
    organization_id = create_webhooks()

    from webhooks.delivery import claims, record
    from webhooks.models import Delivery

    def orm_record(changes: list[Any]) -> object:
        return record._write_in_transaction(changes)

    spellings = {
        "orm": (claims._claim_compare_and_set, orm_record),
        "one statement": (claims._claim_in_one_statement, record.write_in_one_statement),
    }
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for number in range(ROUNDS):
        order = list(spellings) if number % 2 == 0 else list(reversed(spellings))
        for mode in ("by id", "due scan"):
            for name in order:
                Delivery.objects.all().delete()
                ids = publish(organization_id)
                claim, write = spellings[name]
                claim_s, record_s, rows = run_spelling(
                    claim, write, ids if mode == "by id" else None
                )
                assert rows == len(ids), (name, mode, rows, len(ids))
                rates = (rows / claim_s, rows / record_s, rows / (claim_s + record_s))
                results.setdefault((mode, name), []).append(rates)
                print(
                    f"round {number + 1} {mode:<8} {name:<13} claim {rates[0]:7.0f}/s  "
                    f"record {rates[1]:7.0f}/s  both {rates[2]:7.0f}/s"
                )
    print(f"\nmedians of {ROUNDS} rounds, {ROWS} rows, {BATCH} a claim (rows/s):")
    for mode in ("by id", "due scan"):
        orm = [statistics.median(r) for r in zip(*results[(mode, "orm")], strict=True)]
        one = [statistics.median(r) for r in zip(*results[(mode, "one statement")], strict=True)]
        print(
            f"  {mode:<8}  orm: claim {orm[0]:6.0f}, record {orm[1]:6.0f}, both {orm[2]:6.0f}"
            f"   one statement: claim {one[0]:6.0f}, record {one[1]:6.0f}, both {one[2]:6.0f}"
            f"   ratio one/orm: claim x{one[0] / orm[0]:.2f}, record x{one[1] / orm[1]:.2f}, "
            f"both x{one[2] / orm[2]:.2f}"
        )
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min)")


if __name__ == "__main__":
    main()
