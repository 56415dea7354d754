"""`demo` with DEMO_WEBHOOK_URL: a webhook of the demo organization to the local receiver."""

from io import StringIO

import pytest
from django.core.management import call_command

from webhooks.events import Event
from webhooks.models import Webhook

pytestmark = pytest.mark.django_db

URL = "https://receiver.gshost-demo.example:8443/hook"


@pytest.fixture(name="receiver_env")
def receiver_env_fixture(monkeypatch, tmp_path):
    secret_file = tmp_path / "webhook-secret"
    monkeypatch.setenv("DEMO_WEBHOOK_URL", URL)
    monkeypatch.setenv("DEMO_WEBHOOK_SECRET_FILE", str(secret_file))
    return secret_file


def run_demo() -> str:
    out = StringIO()
    call_command("demo", stdout=out)
    return out.getvalue()


def test_it_registers_a_webhook_for_all_eight_events(receiver_env):
    out = run_demo()
    webhook = Webhook.objects.get(organization__slug="demo", url=URL)
    assert sorted(webhook.events) == sorted(event.value for event in Event)
    assert webhook.id in out


def test_it_gives_the_receiver_the_signing_secret(receiver_env):
    run_demo()
    assert receiver_env.read_text().strip().startswith("whsec_")


def test_it_replaces_the_webhook_on_every_run(receiver_env):
    run_demo()
    first_secret = receiver_env.read_text()
    run_demo()
    assert Webhook.objects.filter(url=URL).count() == 1
    assert receiver_env.read_text() != first_secret


def test_it_registers_no_webhook_without_a_receiver_url(monkeypatch):
    monkeypatch.delenv("DEMO_WEBHOOK_URL", raising=False)
    run_demo()
    assert not Webhook.objects.exists()
