"""A second factor for the panel: an authenticator app (TOTP) and recovery codes, through the
panel's forms. Passkeys are in tests/browser/test_passkeys.py (they need a browser)."""

import pytest
from django.test import Client
from django_otp.plugins.otp_static.models import StaticToken
from freezegun import freeze_time

from audit.models import AuditRecord
from audit.services import PanelAction
from tests.accounts.second_factor_kit import (
    SECOND_FACTOR,
    SECURITY,
    TOTP_ADD,
    code_of,
    enrol_totp,
    is_signed_in,
    password_step,
    secret_on,
)

ALICE = ("alice@acme.test", "alice-pw-123")
PASSKEY_SIGN_IN = "/accounts/login/passkey/"
START = "2026-12-01 10:00:00"


@pytest.fixture(name="visitor")
def visitor_fixture() -> Client:
    """A browser of its own, not signed in (`alice_client` is pytest-django's `client`)."""
    return Client()


@pytest.fixture(name="enrolled")
def enrolled_fixture(alice_client: Client) -> tuple[str, list[str]]:
    """Alice, with an authenticator app set up at START (and its recovery codes)."""
    with freeze_time(START):
        return enrol_totp(alice_client)


def test_it_shows_a_qr_code_and_the_secret_of_a_new_authenticator_app(alice_client):
    page = alice_client.get(TOTP_ADD).content.decode()
    assert "<svg" in page
    assert len(secret_on(page)) == 32  # 160 bits, base32


def test_it_confirms_an_authenticator_app_with_its_first_code(alice_client):
    secret = secret_on(alice_client.get(TOTP_ADD).content.decode())
    response = alice_client.post(TOTP_ADD, {"code": code_of(secret)})
    assert response.status_code == 302
    assert "An authenticator app (TOTP) is set up." in alice_client.get(SECURITY).content.decode()


def test_it_refuses_to_confirm_an_authenticator_app_with_a_wrong_code(alice_client):
    alice_client.get(TOTP_ADD)
    response = alice_client.post(TOTP_ADD, {"code": "000000"})
    assert response.status_code == 400
    assert "Not set up." in alice_client.get(SECURITY).content.decode()


def test_it_audits_a_wrong_code_given_to_confirm_an_authenticator_app(alice_client, alice):
    alice_client.get(TOTP_ADD)
    alice_client.post(TOTP_ADD, {"code": "000000"})
    row = AuditRecord.objects.get(action=PanelAction.MFA_CODE_FAIL)
    assert (row.actor_email, row.status_code) == ("alice@acme.test", 400)


def test_it_shows_ten_recovery_codes_once_with_the_first_factor(alice_client):
    with freeze_time(START):
        _, codes = enrol_totp(alice_client)
    assert len(set(codes)) == 10
    assert alice_client.get("/accounts/security/recovery-codes/")["Location"] == SECURITY


def test_it_asks_for_a_code_after_the_password(enrolled, visitor):
    with freeze_time(START):
        password_step(visitor, *ALICE)
    assert not is_signed_in(visitor)
    assert visitor.get("/panel/keys/").status_code == 302


def test_it_signs_in_with_the_password_and_a_current_code(enrolled, visitor):
    secret, _ = enrolled
    with freeze_time(START) as clock:
        clock.tick(30)  # the code used to enrol is spent; the next one is not
        password_step(visitor, *ALICE)
        response = visitor.post(SECOND_FACTOR, {"code": code_of(secret)})
    assert response.status_code == 302
    assert response["Location"] == "/panel/keys/"
    assert is_signed_in(visitor)


def test_it_refuses_a_code_used_a_second_time_within_its_window(enrolled):
    secret, _ = enrolled
    first, second = Client(), Client()
    with freeze_time(START) as clock:
        clock.tick(30)
        code = code_of(secret)
        password_step(first, *ALICE)
        password_step(second, *ALICE)
        assert first.post(SECOND_FACTOR, {"code": code}).status_code == 302
        clock.tick(5)  # same 30 s step
        response = second.post(SECOND_FACTOR, {"code": code})
    assert response.status_code == 400
    assert not is_signed_in(second)


def test_it_accepts_the_code_of_the_step_before_or_after(enrolled, visitor):
    secret, _ = enrolled
    with freeze_time(START) as clock:
        clock.tick(60)
        code = code_of(secret)
        clock.tick(30)  # the app's clock is one step behind the server's
        password_step(visitor, *ALICE)
        assert visitor.post(SECOND_FACTOR, {"code": code}).status_code == 302


def test_a_code_of_the_step_after_does_not_shift_the_window(enrolled):
    """The window is one step either side of the server's clock, always: an accepted code of
    the step ahead must not move it (django-otp's drift tracking, OTP_TOTP_SYNC, is off)."""
    secret, _ = enrolled
    ahead, behind = Client(), Client()
    with freeze_time(START) as clock:
        clock.tick(90)
        code_ahead = code_of(secret)
        clock.tick(-30)  # the app's clock is one step ahead of the server's
        password_step(ahead, *ALICE)
        assert ahead.post(SECOND_FACTOR, {"code": code_ahead}).status_code == 302
        clock.tick(60)
        code_behind = code_of(secret)
        clock.tick(30)  # now it is one step behind
        password_step(behind, *ALICE)
        assert behind.post(SECOND_FACTOR, {"code": code_behind}).status_code == 302


def test_it_signs_in_with_a_recovery_code_once(enrolled):
    _, codes = enrolled
    first, second = Client(), Client()
    password_step(first, *ALICE)
    assert first.post(SECOND_FACTOR, {"code": codes[0]}).status_code == 302
    password_step(second, *ALICE)
    assert second.post(SECOND_FACTOR, {"code": codes[0]}).status_code == 400
    assert not is_signed_in(second)


def test_it_counts_wrong_codes_toward_the_sign_in_limit(enrolled, visitor, settings):
    settings.LOGIN_FAILURE_LIMIT = settings.AXES_FAILURE_LIMIT = 3
    secret, _ = enrolled
    with freeze_time(START) as clock:
        clock.tick(30)
        password_step(visitor, *ALICE)
        for _ in range(3):  # the third reaches the limit: it is answered 429 already
            visitor.post(SECOND_FACTOR, {"code": "123456"})
        response = visitor.post(SECOND_FACTOR, {"code": code_of(secret)})
    assert response.status_code == 429
    assert not is_signed_in(visitor)


def test_a_locked_sign_in_tells_the_passkey_step_when_to_try_again(enrolled, visitor, settings):
    settings.LOGIN_FAILURE_LIMIT = settings.AXES_FAILURE_LIMIT = 3
    with freeze_time(START):
        password_step(visitor, *ALICE)
        for _ in range(3):
            visitor.post(SECOND_FACTOR, {"code": "123456"})
        response = visitor.post(PASSKEY_SIGN_IN, "{}", content_type="application/json")
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    assert "try again after" in response.json()["error"]


def test_wrong_codes_and_wrong_passwords_share_one_count(enrolled, visitor, settings):
    settings.LOGIN_FAILURE_LIMIT = settings.AXES_FAILURE_LIMIT = 3
    visitor.post("/accounts/login/", {"username": ALICE[0], "password": "wrong"})
    visitor.post("/accounts/login/", {"username": ALICE[0], "password": "wrong"})
    password_step(visitor, *ALICE)
    visitor.post(SECOND_FACTOR, {"code": "123456"})
    response = visitor.post("/accounts/login/", {"username": ALICE[0], "password": ALICE[1]})
    assert response.status_code == 429


def test_removing_the_authenticator_app_needs_a_current_code(enrolled, alice_client):
    response = alice_client.post("/accounts/security/totp/remove/", {"code": "000000"})
    assert response.status_code == 302
    assert "An authenticator app (TOTP) is set up." in alice_client.get(SECURITY).content.decode()


def test_it_removes_the_authenticator_app_with_a_current_code(enrolled, alice_client):
    secret, _ = enrolled
    with freeze_time(START) as clock:
        clock.tick(30)
        alice_client.post("/accounts/security/totp/remove/", {"code": code_of(secret)})
    assert "Not set up." in alice_client.get(SECURITY).content.decode()


def test_a_person_without_a_factor_signs_in_with_the_password_alone(alice, client):
    response = client.post("/accounts/login/", {"username": ALICE[0], "password": ALICE[1]})
    assert response["Location"] == "/panel/keys/"


def test_the_admin_sign_in_asks_for_the_code_too(enrolled, visitor):
    response = visitor.post("/admin/login/", {"username": ALICE[0], "password": ALICE[1]})
    assert response["Location"] == SECOND_FACTOR
    assert not is_signed_in(visitor)


def _actions(organization_id: str) -> list[str]:
    rows = AuditRecord.objects.filter(organization_id=organization_id).order_by("occurred_at")
    return list(rows.values_list("action", flat=True))


def test_it_audits_adding_an_authenticator_app_and_its_recovery_codes(enrolled, alice):
    assert sorted(_actions(alice.organization_id)) == [
        PanelAction.MFA_RECOVERY_CODES_CREATE,
        PanelAction.MFA_TOTP_ADD,
    ]


def test_it_audits_a_failed_code_and_a_recovery_code_used(enrolled, visitor, alice):
    _, codes = enrolled
    password_step(visitor, *ALICE)
    visitor.post(SECOND_FACTOR, {"code": "123456"})
    visitor.post(SECOND_FACTOR, {"code": codes[3]})
    failed, used = _actions(alice.organization_id)[-2:]
    assert (failed, used) == (PanelAction.MFA_CODE_FAIL, PanelAction.MFA_RECOVERY_CODE_USE)
    row = AuditRecord.objects.get(action=PanelAction.MFA_CODE_FAIL)
    assert (row.actor_email, row.status_code) == ("alice@acme.test", 401)


def test_it_audits_removing_a_factor(enrolled, alice_client, alice):
    secret, _ = enrolled
    with freeze_time(START) as clock:
        clock.tick(30)
        alice_client.post("/accounts/security/totp/remove/", {"code": code_of(secret)})
    assert PanelAction.MFA_TOTP_REMOVE in _actions(alice.organization_id)


def test_it_makes_new_recovery_codes_with_a_current_code(enrolled, alice_client):
    _, old = enrolled
    response = alice_client.post("/accounts/security/recovery-codes/renew/", {"code": old[0]})
    assert response["Location"] == "/accounts/security/recovery-codes/"
    page = alice_client.get(response["Location"]).content.decode()
    assert old[1] not in page
    assert "10 unused recovery codes left" in alice_client.get(SECURITY).content.decode()


def test_it_does_not_replace_an_authenticator_app_without_its_code(enrolled, alice_client):
    response = alice_client.get(TOTP_ADD)
    assert response["Location"] == SECURITY


def test_it_stores_no_recovery_code_as_it_is_shown(enrolled):
    _, codes = enrolled
    stored = set(StaticToken.objects.values_list("token", flat=True))
    assert len(stored) == 10
    assert not stored & set(codes)
