"""The shipped web server configuration (gunicorn.conf.py): while test pings wait on a receiver
that trickles its answer, another request is still answered.

Real processes: gunicorn with the shipped configuration, on a SQLite database of its own, and
a local HTTPS receiver that answers one byte at a time.
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

import pytest

from tests.ports import free_port
from tests.webhooks.receiver import HttpsReceiver

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).parent / "gunicorn"
HOST = "hooks.example.com"
TRICKLE_SECONDS = 0.4  # between body bytes
BODY = b"pong-pong-pong"  # so each ping takes about 14 x 0.4 s = 5.6 s

SETUP = """
from accounts.services import organization_create, member_add, api_key_create
from audit.actors import Actor
from audit.services import PanelContext
from webhooks.services import webhook_create
org = organization_create(slug="acme", name="Acme")
owner = member_add(organization=org, email="alice@acme.test", password=None, owner=True)
key = api_key_create(membership=owner, name="k", scopes=["webhooks:manage", "keys:read"],
                     actor=Actor.person(PanelContext(user_email="alice@acme.test"))).full_key
hook, _ = webhook_create(organization=org, url="{url}", events=["server.started"],
                         actor=Actor.system("tests"))
print(json.dumps({{"key": key, "webhook": hook.id}}))
"""


@pytest.fixture
def receiver() -> Iterator[HttpsReceiver]:
    with HttpsReceiver(names=(HOST,)) as started:
        started.set_behaviour(status=200, body=BODY, trickle_interval=TRICKLE_SECONDS)
        yield started


@pytest.fixture
def environment(tmp_path: Path, receiver: HttpsReceiver) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "GUNICORN_", "DATABASE_", "REDIS_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="gshost.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'web.sqlite3'}",
        REDIS_URL="",
        SECRET_KEY="web-server-test-" + "k3y" * 12,
        DEBUG="false",
        PORT=str(free_port()),
        GUNICORN_ACCESS_LOG="",
        WEBHOOK_CA_BUNDLE=receiver.ca_pem_path,
        WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",
        AUDIT_FLUSH_INTERVAL_SECONDS="0",
    )
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True
    )
    return done.stdout.decode()


@pytest.fixture
def world(environment: dict[str, str], receiver: HttpsReceiver) -> dict[str, str]:
    manage(environment, "migrate", "--noinput")
    url = f"https://{HOST}:{receiver.port}/hook"
    out = manage(environment, "shell", "-c", "import json\n" + SETUP.format(url=url))
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def web(environment: dict[str, str], world: dict[str, str]) -> Iterator[str]:
    """gunicorn with the shipped gunicorn.conf.py (only the app module is the test's)."""
    process = subprocess.Popen(
        [str(GUNICORN), "-c", "gunicorn.conf.py", "tests.gshost.loopback_wsgi:application"],
        cwd=ROOT, env=environment,
    )  # fmt: skip
    base = f"http://127.0.0.1:{environment['PORT']}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("gunicorn did not start")
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def call(url: str, key: str, method: str = "GET") -> tuple[int, Any]:
    request = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, json.loads(response.read())


def test_an_unrelated_request_is_answered_while_pings_wait(web, world, receiver):
    ping_url = f"{web}/api/public/v1/webhooks/{world['webhook']}/test"
    pings: list[tuple[int, Any]] = []
    threads = [
        threading.Thread(target=lambda: pings.append(call(ping_url, world["key"], "POST")))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while len(receiver.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(receiver.requests) == 2  # both pings are on the network, waiting

    status, body = call(f"{web}/api/public/v1/account/keys/current", world["key"])

    pings_still_waiting = sum(thread.is_alive() for thread in threads)
    for thread in threads:
        thread.join()
    assert status == 200 and body["name"] == "k"
    assert pings_still_waiting == 2  # answered before either ping was over
    assert [(code, result["success"]) for code, result in pings] == [(200, True)] * 2
