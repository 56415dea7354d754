"""The object-storage settings (BACKUP_S3_*): all of them or none; some but not all stop the
service at start, naming what is missing."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOAD = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.BACKUP_S3_REGION)"
)


def start_with(**values: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "BACKUP_S3_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="gshost.settings", DATABASE_URL="", REDIS_URL="", DEBUG="true"
    )
    env.update(values)
    return subprocess.run(
        [sys.executable, "-c", LOAD], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def test_without_any_it_starts_with_backups_on_the_nodes():
    started = start_with()

    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == "us-east-1"


def test_some_but_not_all_stop_it_naming_the_missing_ones():
    started = start_with(BACKUP_S3_ENDPOINT="https://s3.example", BACKUP_S3_BUCKET="backups")

    assert started.returncode != 0
    assert "BACKUP_S3_ACCESS_KEY_ID, BACKUP_S3_SECRET_ACCESS_KEY" in started.stderr


def test_an_endpoint_that_is_not_a_url_stops_it():
    started = start_with(
        BACKUP_S3_ENDPOINT="s3.example", BACKUP_S3_BUCKET="b", BACKUP_S3_ACCESS_KEY_ID="k",
        BACKUP_S3_SECRET_ACCESS_KEY="s",
    )  # fmt: skip

    assert started.returncode != 0
    assert "BACKUP_S3_ENDPOINT must be an http(s):// URL" in started.stderr
