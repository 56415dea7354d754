"""A real `qcluster` for end-to-end tests: started in its own process group on the test
database (PostgreSQL) with the Redis broker, resolving the receiver's names to loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.signing import SignedPackage

from tests.webhooks.receiver import HttpsReceiver

ROOT = Path(__file__).resolve().parents[2]
ON_POSTGRES = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")

needs_postgres_and_redis = pytest.mark.skipif(
    not (ON_POSTGRES and settings.REDIS_URL),
    reason="end-to-end worker tests need DATABASE_URL on PostgreSQL and REDIS_URL",
)


def worker_environment(receiver: HttpsReceiver, **overrides: str) -> dict[str, str]:
    db = connection.settings_dict
    database_url = (
        f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}"
    )
    return {
        **os.environ,
        "DATABASE_URL": database_url,  # the test database, which these tests commit to
        "REDIS_URL": settings.REDIS_URL,
        "SECRET_KEY": settings.SECRET_KEY,
        "WEBHOOK_SECRET_KEYS": ",".join(settings.WEBHOOK_SECRET_KEYS),
        "WEBHOOK_CA_BUNDLE": receiver.ca_pem_path,
        "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
        "LOG_LEVEL": "WARNING",
        **overrides,
    }


def purge_queued_tasks() -> None:
    """Drop tasks other tests queued, for rows that are gone."""
    get_broker().purge_queue()


def start_cluster(
    receiver: HttpsReceiver, log_path: Path, **overrides: str
) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.webhooks.loopback_qcluster"],
            cwd=ROOT, env=worker_environment(receiver, **overrides), stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def stop_cluster(process: subprocess.Popen[bytes]) -> None:
    """Kill the cluster outright, workers included (its process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def note_after(path: str, seconds: float, mark: str) -> None:
    """A queued task for the cluster: take ``seconds``, then append ``mark`` to ``path``."""
    time.sleep(seconds)
    with open(path, "a") as notes:
        notes.write(f"{mark}\n")


def wait_until_cluster_runs(redis_url: str, timeout: float = 60) -> None:
    """Until a cluster on this Redis has started all of its processes (its sentinel's status,
    saved in Redis, is Idle or Working): one still starting exits if Redis goes away."""
    stats = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for key in stats.keys(f"{Conf.Q_STAT}:*"):
            packed = stats.get(key)
            if packed and SignedPackage.loads(packed).status in (Conf.IDLE, Conf.WORKING):
                return
        time.sleep(0.2)
    raise AssertionError(f"no cluster runs on {redis_url} after {timeout} s")
