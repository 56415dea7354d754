"""The panel's flows as a person clicks through them, in Chromium, JavaScript included."""

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.utils import timezone
from playwright.sync_api import Page, expect

from accounts.models import ApiKey, Membership
from audit.actors import Actor
from servers.models import Server
from servers.runtime import runtime_sweep
from servers.services import PowerAction, server_power, server_send_command
from tests.browser.conftest import sign_in
from tests.conftest import API, client_for
from tests.webhooks.delivery_fixtures import deliver_due_now, use_resolver
from tests.webhooks.receiver import HttpsReceiver, loopback_resolver
from webhooks.models import Delivery, Webhook
from webhooks.services import webhook_create

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


pytestmark = [
    pytest.mark.django_db(transaction=True),
]

HOST = "hooks.browser-tests.example"  # a public-looking name, resolved to loopback below


@pytest.fixture(name="owner_page")
def owner_page_fixture(page: Page, alice: Membership) -> Page:
    sign_in(page, "alice@acme.test", "alice-pw-123")
    return page


@pytest.fixture(name="receiver")
def receiver_fixture(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpsReceiver]:
    """A local HTTPS receiver the service trusts, reached under HOST through loopback."""
    with HttpsReceiver(names=(HOST,)) as receiver:
        settings.WEBHOOK_CA_BUNDLE = receiver.ca_pem_path
        settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
        settings.WEBHOOK_TIMEOUT_SECONDS = 5.0
        use_resolver(monkeypatch, loopback_resolver)
        yield receiver  # the suite's one process-state fixture stops the engine afterwards


def _finish_transitions() -> None:
    runtime_sweep(timezone.now() + timedelta(minutes=1))


def test_it_signs_a_person_in_to_the_panel(page, alice):
    sign_in(page, "alice@acme.test", "alice-pw-123")
    expect(page).to_have_url(re.compile(r"/panel/keys/$"))
    expect(page.get_by_text("alice@acme.test").first).to_be_visible()


def test_it_creates_a_key_and_copies_it_with_the_copy_button(owner_page):
    owner_page.goto("/panel/keys/new")
    owner_page.fill("input[name=name]", "ci-deployer")
    owner_page.check("input[name=scopes][value='servers:read']")
    owner_page.get_by_role("button", name="Create key").click()
    shown = owner_page.locator("#new-api-key").inner_text().strip()
    assert shown.startswith("gsk_") and len(shown) == 56
    owner_page.click("#copy-key")
    expect(owner_page.locator("#copy-status")).to_have_text("Copied to the clipboard.")
    assert owner_page.evaluate("() => navigator.clipboard.readText()") == shown


def test_without_javascript_the_new_key_page_has_no_dead_copy_button(page_without_script, alice):
    sign_in(page_without_script, "alice@acme.test", "alice-pw-123")
    page_without_script.goto("/panel/keys/new")
    page_without_script.fill("input[name=name]", "no-script")
    page_without_script.get_by_role("button", name="Create key").click()
    expect(page_without_script.locator("#new-api-key")).to_have_text(re.compile(r"^gsk_"))
    expect(page_without_script.locator("#copy-key")).to_be_hidden()


def test_it_rotates_a_key(owner_page, make_key):
    old = make_key(["servers:read"], name="rotating")
    owner_page.goto(f"/panel/keys/{old.key_id}/rotate")
    owner_page.fill("input[name=grace_hours]", "0")
    owner_page.get_by_role("button", name="Rotate key").click()
    shown = owner_page.locator("#new-api-key").inner_text().strip()
    assert shown.startswith("gsk_") and old.key_id not in shown
    assert ApiKey.objects.get(key_id=old.key_id).replaced_by == shown[4:12]


def test_it_deletes_a_key(owner_page, make_key):
    doomed = make_key(["servers:read"], name="doomed")
    owner_page.goto("/panel/keys/")
    owner_page.locator("tr", has_text="doomed").get_by_role("link", name="Delete").click()
    owner_page.get_by_role("button", name="Delete key").click()
    owner_page.wait_for_url("**/panel/keys/")
    expect(
        owner_page.get_by_role("status").or_(owner_page.locator(".alert")).first
    ).to_contain_text("revoked for good")
    expect(owner_page.locator("tr", has_text="doomed")).to_contain_text("revoked")
    assert ApiKey.objects.get(key_id=doomed.key_id).revoked_at is not None


def test_it_creates_a_webhook_and_shows_its_secret_once(owner_page):
    owner_page.goto("/panel/webhooks/new")
    owner_page.fill("input[name=url]", f"https://{HOST}/hook")
    owner_page.check("input[name=events][value='server.started']")
    owner_page.get_by_role("button", name="Create webhook").click()
    secret = owner_page.locator("#new-signing-secret").inner_text().strip()
    assert secret.startswith("whsec_")
    owner_page.goto("/panel/webhooks/")
    expect(owner_page.locator("tr", has_text=HOST)).to_have_count(1)
    assert secret not in owner_page.content()


def test_it_sends_a_test_ping_and_shows_its_result(owner_page, acme, receiver):
    webhook_create(
        organization=acme, url=receiver.url(host=HOST), events=["server.started"], actor=TEST_ACTOR
    )
    owner_page.goto("/panel/webhooks/")
    owner_page.get_by_role("button", name="Send test").click()
    expect(owner_page.locator("#test-result")).to_have_text("The receiver accepted the ping.")
    assert receiver.requests[0].header("X-Webhook-Signature")


def test_it_shows_a_server_state_change_without_reloading(owner_page, acme_server):
    owner_page.goto(f"/panel/servers/{acme_server.id}/")
    owner_page.get_by_role("button", name="Start", exact=True).click()
    badge = owner_page.locator(f"[data-server-state='{acme_server.id}']").first
    expect(badge).to_have_text("starting")
    owner_page.goto("/panel/servers/")
    owner_page.evaluate("() => { window.notReloaded = true; }")
    _finish_transitions()
    expect(badge).to_have_text("running")
    assert owner_page.evaluate("() => window.notReloaded") is True


def test_it_shows_console_output_as_it_comes_without_reloading(owner_page, acme_server):
    server_power(server=acme_server, action=PowerAction.START, actor=TEST_ACTOR)
    _finish_transitions()
    owner_page.goto(f"/panel/servers/{acme_server.id}/")
    owner_page.evaluate("() => { window.notReloaded = true; }")
    server_send_command(server=acme_server, command="say hello from the tests", actor=TEST_ACTOR)
    console = owner_page.locator("[data-console-lines]")
    expect(console).to_contain_text("[Server] hello from the tests")
    assert owner_page.evaluate("() => window.notReloaded") is True


def _delivered(acme: Any, server: Server, receiver: HttpsReceiver) -> tuple[Webhook, Delivery]:
    webhook, _secret = webhook_create(
        organization=acme, url=receiver.url(host=HOST), events=["server.started"], actor=TEST_ACTOR
    )
    server_power(server=server, action=PowerAction.START, actor=Actor.system("test"))
    _finish_transitions()
    assert deliver_due_now() == 1
    return webhook, Delivery.objects.get(webhook=webhook)


def test_it_shows_the_delivery_history_and_one_delivery_s_attempts(
    owner_page, acme, acme_server, receiver
):
    webhook, delivery = _delivered(acme, acme_server, receiver)
    owner_page.goto(f"/panel/webhooks/{webhook.id}/deliveries")
    row = owner_page.locator("tr", has_text=delivery.id)
    expect(row).to_contain_text("server.started")
    expect(row).to_contain_text("success")
    row.get_by_role("link").first.click()
    owner_page.wait_for_url(f"**/deliveries/{delivery.id}**")
    expect(owner_page.locator("body")).to_contain_text("200")
    expect(owner_page.locator("body")).to_contain_text("automatic")


def test_it_filters_the_audit_page(owner_page, make_key, acme_server):
    reader = make_key(["servers:read"], name="reader")
    other = make_key(["servers:read"], name="other")
    client_for(reader).get(f"{API}/servers/{acme_server.id}")
    client_for(other).get(f"{API}/servers")
    owner_page.goto("/panel/audit/")
    owner_page.fill("input[name=key_id]", reader.key_id)
    owner_page.get_by_role("button", name="Filter").click()
    rows = owner_page.locator("table.audit tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(reader.key_id)


def test_it_adds_an_ssh_key_from_the_nav_and_removes_it(owner_page):
    public = ed25519.Ed25519PrivateKey.generate().public_key()
    line = public.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()
    owner_page.goto("/panel/keys/")
    owner_page.get_by_role("link", name="SSH keys").click()
    owner_page.fill("input[name=name]", "laptop")
    owner_page.fill("textarea[name=public_key]", line + " alice@laptop")
    owner_page.get_by_role("button", name="Add key").click()
    row = owner_page.locator("tr.ssh-key-row", has_text="laptop")
    expect(row).to_contain_text("SHA256:")
    row.get_by_role("button", name="Remove").click()
    expect(owner_page.locator("tr.ssh-key-row")).to_have_count(0)
