"""Account -> Sessions: a person's panel sessions listed and ended, and what ends them all."""

from urllib.parse import urlsplit

import pytest
from django.core.management import call_command
from django.test import Client
from freezegun import freeze_time

from accounts.models import PanelSession
from accounts.panel_sessions import EndReason, SessionsEnded
from application.links import owner_link_create
from application.models import LinkPurpose
from audit.models import AuditRecord
from audit.services import PanelAction
from tests.accounts.second_factor_kit import code_of, enrol_totp, is_signed_in

SESSIONS = "/accounts/sessions/"
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"
CHROME = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36"


def signed_in(user_agent: str, address: str) -> Client:
    """A browser of Alice's, signed in through the form."""
    browser = Client(HTTP_USER_AGENT=user_agent, REMOTE_ADDR=address)
    response = browser.post(
        "/accounts/login/", {"username": "alice@acme.test", "password": "alice-pw-123"}
    )
    assert response.status_code == 302
    return browser


def change_password(browser: Client):
    return browser.post(
        "/accounts/security/password/",
        {
            "old_password": "alice-pw-123",
            "new_password1": "a-new-long-passphrase-1",
            "new_password2": "a-new-long-passphrase-1",
        },
    )


@pytest.fixture(name="laptop")
def laptop_fixture(alice) -> Client:
    return signed_in(FIREFOX, "198.51.100.7")


@pytest.fixture(name="phone")
def phone_fixture(alice) -> Client:
    return signed_in(CHROME, "203.0.113.9")


def session_ids(page: str) -> list[int]:
    return [int(part.split('"', 1)[0]) for part in page.split('data-session-id="')[1:]]


def test_it_lists_the_persons_sessions_with_browser_and_address(laptop, phone):
    page = laptop.get(SESSIONS).content.decode()
    assert "Firefox" in page and "Chrome" in page
    assert "198.51.100.7" in page and "203.0.113.9" in page
    assert page.count("(this one)") == 1


def test_it_lists_only_the_persons_own_sessions(laptop, bob):
    Client().post("/accounts/login/", {"username": "bob@acme.test", "password": "bob-pw-123"})
    assert len(session_ids(laptop.get(SESSIONS).content.decode())) == 1


def test_it_ends_one_session(laptop, phone):
    phone_session = next(
        i for i in session_ids(laptop.get(SESSIONS).content.decode()) if i != _current(laptop)
    )
    laptop.post(f"/accounts/sessions/{phone_session}/end/")
    assert phone.get("/panel/keys/").status_code == 302  # to the sign-in page
    assert laptop.get("/panel/keys/").status_code == 200


def test_it_ends_every_other_session(laptop, phone):
    tablet = signed_in(FIREFOX, "192.0.2.10")
    laptop.post("/accounts/sessions/end-others/")
    assert not is_signed_in(phone) and not is_signed_in(tablet)
    assert session_ids(laptop.get(SESSIONS).content.decode()) == [_current(laptop)]


def test_a_password_change_ends_every_other_session(laptop, phone):
    assert change_password(laptop).status_code == 302
    assert not is_signed_in(phone)
    assert laptop.get("/panel/keys/").status_code == 200


def test_removing_a_factor_ends_every_other_session(laptop):
    with freeze_time("2026-12-01 10:00:00") as clock:
        secret, _ = enrol_totp(laptop)
        clock.tick(30)
        phone = Client()
        phone.post("/accounts/login/", {"username": "alice@acme.test", "password": "alice-pw-123"})
        phone.post("/accounts/login/second-factor/", {"code": code_of(secret)})
        assert is_signed_in(phone)
        clock.tick(30)
        laptop.post("/accounts/security/totp/remove/", {"code": code_of(secret)})
    assert not is_signed_in(phone)
    assert is_signed_in(laptop)


def test_it_audits_each_ended_session(laptop, phone, alice):
    laptop.post("/accounts/sessions/end-others/")
    row = AuditRecord.objects.get(action=PanelAction.SESSION_END)
    assert (row.organization_id, row.actor_email) == (alice.organization_id, "alice@acme.test")


def test_a_password_change_tells_the_registered_hooks(
    laptop, phone, alice, monkeypatch, django_capture_on_commit_callbacks
):
    told: list[SessionsEnded] = []
    monkeypatch.setattr("accounts.panel_sessions._hooks", [told.append])
    with django_capture_on_commit_callbacks(execute=True):
        change_password(laptop)
    (news,) = told
    assert (news.user_id, news.reason) == (alice.user_id, EndReason.PASSWORD_CHANGED)
    assert news.credentials_changed
    assert news.kept_session_key == laptop.session.session_key
    assert len(news.ended_session_keys) == 1


def test_a_password_change_withdraws_the_persons_access_on_the_nodes(
    laptop, alice, withdrawn, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        change_password(laptop)
    (withdrawal,) = withdrawn
    assert withdrawal.person_ids == frozenset({str(alice.user_id)})
    assert withdrawal.server_ids == frozenset()


def _current(browser: Client) -> int:
    from accounts.models import PanelSession

    return PanelSession.objects.get(session_key=browser.session.session_key).id


def test_it_shows_when_each_session_was_last_seen(alice):
    with freeze_time("2026-12-01 10:00:00") as clock:
        laptop = signed_in(FIREFOX, "198.51.100.7")
        clock.tick(120)
        laptop.get("/panel/keys/")
        page = laptop.get(SESSIONS).content.decode()
    assert '<time datetime="2026-12-01T10:00:00+00:00">' in page  # signed in
    assert '<time datetime="2026-12-01T10:02:00+00:00">' in page  # last seen


# Every other path that sets a password ends the person's sessions the same way.


def test_a_password_set_in_the_admin_ends_every_session_of_the_person(
    laptop, phone, alice, staff_client, withdrawn, django_capture_on_commit_callbacks
):
    new = "a-new-long-passphrase-2"
    with django_capture_on_commit_callbacks(execute=True):
        staff_client.post(
            f"/admin/accounts/user/{alice.user_id}/password/",
            {"password1": new, "password2": new, "usable_password": "true"},
        )
    assert not is_signed_in(laptop) and not is_signed_in(phone)
    assert [w.person_ids for w in withdrawn] == [frozenset({str(alice.user_id)})]
    changed = AuditRecord.objects.get(action=PanelAction.PASSWORD_CHANGE)
    assert changed.actor_email == "staff@gshost.test"  # who did it, not whose it was


def test_a_password_set_through_an_owners_link_ends_every_session_of_the_person(
    laptop, alice, withdrawn, django_capture_on_commit_callbacks
):
    link = owner_link_create(
        user=alice.user, organization=alice.organization, purpose=LinkPurpose.SET_PASSWORD
    )
    new = "a-new-long-passphrase-3"
    with django_capture_on_commit_callbacks(execute=True):
        Client().post(urlsplit(link.url).path, {"new_password1": new, "new_password2": new})
    assert not is_signed_in(laptop)
    assert [w.person_ids for w in withdrawn] == [frozenset({str(alice.user_id)})]


def test_a_new_password_from_addmember_ends_every_session_of_the_person(
    laptop, alice, withdrawn, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        call_command("addmember", "acme", "alice@acme.test", "--owner", "--password", "pw-4-alice")
    assert not is_signed_in(laptop)
    assert [w.person_ids for w in withdrawn] == [frozenset({str(alice.user_id)})]


def test_addmember_with_the_same_password_ends_nothing(laptop, alice):
    call_command("addmember", "acme", "alice@acme.test", "--owner", "--password", "alice-pw-123")
    assert is_signed_in(laptop)


def test_signing_out_ends_the_session_and_audits_it(laptop, alice):
    laptop.post("/accounts/logout/")
    row = AuditRecord.objects.get(action=PanelAction.SESSION_END)
    assert (row.organization_id, row.actor_email) == (alice.organization_id, "alice@acme.test")
    assert not PanelSession.objects.filter(user=alice.user).exists()
