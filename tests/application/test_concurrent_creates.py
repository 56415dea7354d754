"""Five identical creates at once, spread over two web processes (two gunicorns, one worker
each, on one database): exactly one server, and all five answered with it.

Real processes on a database of their own: PostgreSQL when the suite runs on it (a database
made for this module), else a SQLite file.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).parent / "gunicorn"
CREATES = 5

SETUP = """
import json
from application.integration_keys import integration_key_create
from application.scopes import CATALOGUE
from application.customers import CustomerInput, customer_create
key = integration_key_create(name="whmcs", scopes=CATALOGUE)
org, _ = customer_create(integration_pk=key.key.pk, data=CustomerInput(
    external_id="c-1", name="Shop", owner_email="o@shop.test", owner_name="O", request_hash=""))
print(json.dumps({"key": key.full_key, "customer": org.id}))
"""


def server_count(webs: list[str], world: dict[str, str]) -> int:
    """The servers there are, as the service lists them (a page holds them all here)."""
    listed = requests.get(
        f"{webs[0]}/api/application/v1/servers?limit=100",
        headers={"Authorization": f"Bearer {world['key']}"},
        timeout=30,
    )
    return len(listed.json()["results"])


def _database_url(tmp_path: Path) -> Iterator[str]:
    given = os.environ.get("DATABASE_URL", "")
    if not given.startswith("postgres"):
        yield f"sqlite:///{tmp_path / 'web.sqlite3'}"
        return
    import psycopg

    parts = urlsplit(given)
    name = parts.path.lstrip("/") + "_concurrent_creates"
    admin = urlunsplit((parts.scheme, parts.netloc, "/postgres", "", ""))
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    tmp_path = tmp_path_factory.mktemp("concurrent")
    for database_url in _database_url(tmp_path):
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "GUNICORN_", "DATABASE_", "REDIS_"))
        }
        env.update(
            DJANGO_SETTINGS_MODULE="tests.settings",
            DATABASE_URL=database_url,
            REDIS_URL="",
            DEBUG="false",
            GUNICORN_ACCESS_LOG="",
            GUNICORN_WORKERS="1",
            AUDIT_FLUSH_INTERVAL_SECONDS="0",
        )
        yield env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True
    )
    return done.stdout.decode()


@pytest.fixture(scope="module")
def world(environment: dict[str, str]) -> dict[str, str]:
    manage(environment, "migrate", "--noinput")
    out = manage(environment, "shell", "-c", SETUP)
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def webs(
    environment: dict[str, str], world: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[str]]:
    """Two web processes on one database."""
    ports = [free_port(), free_port()]
    sockets = tmp_path_factory.mktemp("control")
    processes = [
        subprocess.Popen(
            [
                str(GUNICORN),
                "-c",
                "gunicorn.conf.py",
                "gshost.wsgi:application",
                "--control-socket",
                str(sockets / f"{port}.ctl"),
            ],
            cwd=ROOT,
            env={**environment, "PORT": str(port)},
        )
        for port in ports
    ]
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        for base in bases:
            _wait_for(base)
        yield bases
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=30)


def _wait_for(base: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail("gunicorn did not start")


def _at_once(
    webs: list[str], world: dict[str, str], body: dict[str, Any], **headers: str
) -> list[requests.Response]:
    start = threading.Barrier(CREATES)
    answers: list[requests.Response] = []

    def create(index: int) -> None:
        start.wait()
        answers.append(
            requests.post(
                f"{webs[index % 2]}/api/application/v1/servers",
                json=body,
                headers={"Authorization": f"Bearer {world['key']}", **headers},
                timeout=60,
            )
        )

    threads = [threading.Thread(target=create, args=(i,)) for i in range(CREATES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def _body(world: dict[str, str], external_id: str) -> dict[str, Any]:
    limits = {"memory_mb": 1024, "disk_mb": 1024, "cpu_percent": 100, "processes": 64}
    return {
        "external_id": external_id,
        "customer": world["customer"],
        "name": "mc",
        "game": "minecraft",
        "limits": limits,
    }


def test_five_creates_with_one_idempotency_key_make_one_server(webs, world):
    before = server_count(webs, world)

    answers = _at_once(webs, world, _body(world, "s-0"), **{"Idempotency-Key": "order-1"})

    # All five are the first answer again (201): the external id alone would answer 200.
    assert sorted(a.status_code for a in answers) == [201] * CREATES, [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert server_count(webs, world) == before + 1


def test_five_creates_with_one_external_id_make_one_server(webs, world):
    before = server_count(webs, world)

    answers = _at_once(webs, world, _body(world, "s-1"))

    assert sorted(a.status_code for a in answers) == [200] * (CREATES - 1) + [201]
    assert len({a.json()["id"] for a in answers}) == 1
    assert server_count(webs, world) == before + 1
