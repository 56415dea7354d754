"""Passkeys in Chromium, with its virtual authenticator (the DevTools `WebAuthn` domain): the
browser, the panel's script and py_webauthn do the whole ceremony, nothing is faked."""

import re

import pytest
from playwright.sync_api import CDPSession, Page, expect

from accounts.models import Membership, Passkey
from tests.browser.conftest import sign_in

pytestmark = [
    pytest.mark.django_db(transaction=True),
]

# A platform authenticator that holds discoverable credentials and verifies its user at once.
AUTHENTICATOR = {
    "protocol": "ctap2",
    "transport": "internal",
    "hasResidentKey": True,
    "hasUserVerification": True,
    "isUserVerified": True,
    "automaticPresenceSimulation": True,
}


@pytest.fixture(name="authenticator")
def authenticator_fixture(page: Page) -> CDPSession:
    """The page's virtual authenticator (it lives as long as the page)."""
    devtools = page.context.new_cdp_session(page)
    devtools.send("WebAuthn.enable")
    devtools.send("WebAuthn.addVirtualAuthenticator", {"options": AUTHENTICATOR})
    return devtools


def register_passkey(page: Page, name: str) -> None:
    page.goto("/accounts/security/")
    page.fill("#passkey-name", name)
    page.click("#passkey-register")
    page.wait_for_url("**/accounts/security/recovery-codes/")


def sign_out(page: Page) -> None:
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/accounts/login/")


def test_it_registers_a_passkey_and_shows_recovery_codes(page, authenticator, alice):
    sign_in(page, "alice@acme.test", "alice-pw-123")
    register_passkey(page, "Work laptop")
    expect(page.locator("#recovery-codes li")).to_have_count(10)
    passkey = Passkey.objects.get()
    assert (passkey.user_id, passkey.name) == (alice.user_id, "Work laptop")


def test_it_signs_in_with_a_passkey_alone(page, authenticator, alice: Membership):
    sign_in(page, "alice@acme.test", "alice-pw-123")
    register_passkey(page, "Work laptop")
    sign_out(page)
    page.click("#passkey-sign-in")
    page.wait_for_url("**/panel/keys/")
    expect(page.get_by_text("alice@acme.test").first).to_be_visible()
    assert Passkey.objects.get().last_used_at is not None


def test_it_takes_a_passkey_as_the_second_factor_after_the_password(page, authenticator, alice):
    sign_in(page, "alice@acme.test", "alice-pw-123")
    register_passkey(page, "Work laptop")
    sign_out(page)
    page.fill("input[name=username]", "alice@acme.test")
    page.fill("input[name=password]", "alice-pw-123")
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/accounts/login/second-factor/$"))
    page.click("#passkey-sign-in")
    page.wait_for_url("**/panel/keys/")


def test_it_refuses_a_passkey_the_site_does_not_know(page, authenticator, alice):
    sign_in(page, "alice@acme.test", "alice-pw-123")
    register_passkey(page, "Work laptop")
    Passkey.objects.all().delete()  # removed elsewhere; the authenticator still holds it
    sign_out(page)
    page.click("#passkey-sign-in")
    expect(page.locator("#passkey-error")).to_have_text("That passkey could not be verified.")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))


def test_removing_a_passkey_needs_a_current_code(page, authenticator, alice):
    sign_in(page, "alice@acme.test", "alice-pw-123")
    register_passkey(page, "Work laptop")
    recovery_code = page.locator("#recovery-codes code").first.inner_text()
    page.goto("/accounts/security/")
    row = page.locator("tr", has=page.locator(".passkey-name", has_text="Work laptop"))
    row.locator("input[name=code]").fill("000000")
    row.get_by_role("button", name="Remove").click()
    expect(page.get_by_text("That code is not right")).to_be_visible()
    assert Passkey.objects.count() == 1
    row.locator("input[name=code]").fill(recovery_code)
    row.get_by_role("button", name="Remove").click()
    expect(page.get_by_text("No passkeys yet.")).to_be_visible()
    assert Passkey.objects.count() == 0
