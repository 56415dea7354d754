"""Sign-in throttling: an account locks from one address after LOGIN_FAILURE_LIMIT failures
from it, an address after LOGIN_FAILURE_ADDRESS_LIMIT, an account for every address after
LOGIN_FAILURE_ACCOUNT_LIMIT, for LOGIN_LOCKOUT_MINUTES; the panel and admin share it."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.core import mail
from django.test import Client
from freezegun import freeze_time

from accounts.models import User

LOGIN = "/accounts/login/"
ADMIN_LOGIN = "/admin/login/"
RIGHT = {"username": "alice@acme.test", "password": "alice-pw-123"}
WRONG = {"username": "alice@acme.test", "password": "wrong"}


@pytest.fixture(autouse=True)
def limits(settings) -> None:
    settings.LOGIN_FAILURE_LIMIT = settings.AXES_FAILURE_LIMIT = 10
    settings.LOGIN_FAILURE_ADDRESS_LIMIT = 50
    settings.LOGIN_FAILURE_ACCOUNT_LIMIT = 100
    settings.LOGIN_LOCKOUT_MINUTES = 15


def fail(client: Client, times: int, path: str = LOGIN, **credentials: str) -> None:
    for _ in range(times):
        response = client.post(path, {**WRONG, **credentials})
        assert response.status_code in (200, 429)


def signs_in(client: Client, path: str = LOGIN, data: dict | None = None) -> bool:
    response = client.post(path, data or RIGHT)
    return response.status_code == 302 and "_auth_user_id" in client.session


def test_it_refuses_the_right_password_after_ten_failures(client, alice):
    fail(client, 10)
    response = client.post(LOGIN, RIGHT)
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


def test_the_refusal_says_when_to_try_again(client, alice):
    with freeze_time("2026-11-23 10:00:00"):
        fail(client, 10)
        response = client.post(LOGIN, RIGHT)
    assert "Try again after" in response.content.decode()
    assert "10:15 UTC" in response.content.decode()
    assert int(response["Retry-After"]) == 15 * 60


def test_it_still_signs_in_after_nine_failures(client, alice):
    fail(client, 9)
    assert signs_in(client)


def test_it_signs_in_again_once_the_lock_is_over(client, alice):
    with freeze_time("2026-11-23 10:00:00") as frozen:
        fail(client, 10)
        frozen.tick(timedelta(minutes=16))
        assert signs_in(client)


def test_a_success_resets_the_accounts_count(client, alice):
    fail(client, 9)
    assert signs_in(client)
    client.logout()
    fail(client, 9)
    assert signs_in(client)


def test_it_counts_the_account_whatever_the_case_of_the_email(client, alice):
    fail(client, 10, username="ALICE@acme.test")
    assert client.post(LOGIN, RIGHT).status_code == 429


def test_the_lock_on_one_account_leaves_another_account_alone(client, alice, bob):
    fail(client, 10)
    assert signs_in(client, data={"username": "bob@acme.test", "password": "bob-pw-123"})


def test_it_locks_an_address_after_fifty_failures_across_accounts(client, alice):
    for n in range(50):
        client.post(LOGIN, {"username": f"nobody{n}@acme.test", "password": "x"})
    assert client.post(LOGIN, RIGHT).status_code == 429


def test_the_address_lock_leaves_other_addresses_alone(alice):
    elsewhere, here = Client(REMOTE_ADDR="198.51.100.7"), Client(REMOTE_ADDR="203.0.113.9")
    for n in range(50):
        elsewhere.post(LOGIN, {"username": f"nobody{n}@acme.test", "password": "x"})
    assert signs_in(here)


def test_it_counts_the_forwarded_address_only_from_a_trusted_proxy(settings, alice):
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    proxy = Client(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.9")
    fail(proxy, 1)
    assert AccessAttempt.objects.get().ip_address == "203.0.113.9"


def test_it_ignores_a_forwarded_address_from_anyone_else(alice):
    direct = Client(REMOTE_ADDR="198.51.100.7", HTTP_X_FORWARDED_FOR="203.0.113.9")
    fail(direct, 1)
    assert AccessAttempt.objects.get().ip_address == "198.51.100.7"


def test_the_admin_sign_in_shares_the_count(client, alice):
    User.objects.filter(email="alice@acme.test").update(is_staff=True, is_superuser=True)
    fail(client, 5)
    fail(client, 5, path=ADMIN_LOGIN)
    response = client.post(ADMIN_LOGIN, RIGHT)
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


def test_staff_see_and_clear_lockouts_in_admin(client, alice):
    fail(client, 10)
    staff = User.objects.create_superuser(email="staff@gshost.test", password="staff-pw-123")
    admin = Client()
    admin.force_login(staff)
    listing = admin.get("/admin/axes/accessattempt/")
    assert "alice@acme.test" in listing.content.decode()
    attempt = AccessAttempt.objects.get()
    admin.post(
        "/admin/axes/accessattempt/",
        {"action": "delete_selected", "_selected_action": [attempt.pk], "post": "yes"},
    )
    assert signs_in(client)


def test_an_attempt_during_the_lock_does_not_extend_it(client, alice):
    with freeze_time("2026-11-23 10:00:00") as frozen:
        fail(client, 10)
        frozen.tick(timedelta(minutes=10))
        fail(client, 5)
        response = client.post(LOGIN, RIGHT)
        assert response.status_code == 429
        assert "10:15 UTC" in response.content.decode()
        frozen.tick(timedelta(minutes=6))
        assert signs_in(client)


def at(address: str) -> Client:
    return Client(REMOTE_ADDR=address)


def test_failures_from_one_address_do_not_lock_the_owner_out_elsewhere(alice):
    stranger = at("198.51.100.7")
    fail(stranger, 30, username=" ALICE@acme.test ")
    assert stranger.post(LOGIN, RIGHT).status_code == 429
    assert signs_in(at("203.0.113.9"))


def test_failures_from_one_address_do_not_lock_the_admin_out_elsewhere(alice):
    User.objects.filter(email="alice@acme.test").update(is_staff=True, is_superuser=True)
    fail(at("198.51.100.7"), 30, path=ADMIN_LOGIN)
    assert signs_in(at("203.0.113.9"), path=ADMIN_LOGIN)


def _from_many_addresses(failures: int, start: int = 0) -> None:
    """Alice's wrong password, 10 times from each address in turn (n // 10 picks it)."""
    for n in range(start, start + failures):
        at(f"198.51.100.{n // 10 + 1}").post(LOGIN, WRONG)


def test_it_locks_the_account_for_every_address_after_a_hundred_failures(alice):
    _from_many_addresses(99)
    assert signs_in(at("203.0.113.9"))  # clears only that address's failures (none)
    _from_many_addresses(1, start=99)
    anywhere = at("203.0.113.10")
    response = anywhere.post(LOGIN, RIGHT)
    assert response.status_code == 429
    assert "_auth_user_id" not in anywhere.session


def test_the_account_lock_ends_after_the_lockout_period_whatever_is_tried(alice):
    with freeze_time("2026-11-23 10:00:00") as frozen:
        _from_many_addresses(100)
        frozen.tick(timedelta(minutes=14))
        _from_many_addresses(40, start=100)  # refused, not recorded
        assert at("203.0.113.9").post(LOGIN, RIGHT).status_code == 429
        frozen.tick(timedelta(minutes=2))
        assert signs_in(at("203.0.113.9"))


def test_the_owner_is_emailed_once_when_the_account_is_locked_for_every_address(alice):
    _from_many_addresses(99)
    assert mail.outbox == []
    _from_many_addresses(20, start=99)
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["alice@acme.test"]
    assert "locked" in mail.outbox[0].subject


def test_no_email_goes_to_a_member_who_owns_nothing_nor_for_an_unknown_account(bob):
    for n in range(100):
        at(f"198.51.100.{n // 10 + 1}").post(LOGIN, {"username": "bob@acme.test", "password": "x"})
        at(f"192.0.2.{n // 10 + 1}").post(LOGIN, {"username": "ghost@acme.test", "password": "x"})
    assert mail.outbox == []


def test_a_success_clears_only_that_addresss_failures(alice):
    _from_many_addresses(95)
    assert signs_in(at("198.51.100.10"))  # its 5 failures are cleared: 90 for the account
    _from_many_addresses(9, start=200)
    assert signs_in(at("203.0.113.9"))
