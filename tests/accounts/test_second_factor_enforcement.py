"""A second factor required: by an owner of every member, and by ADMIN_REQUIRE_2FA of staff."""

import secrets

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from freezegun import freeze_time

from accounts.models import Organization, User
from audit.models import AuditRecord
from audit.services import PanelAction
from tests.accounts.second_factor_kit import SECURITY, code_of, enrol_totp, secret_on
from tests.gshost.test_production_settings import base_environment, python

RULE = "/accounts/security/organization/"


@pytest.fixture(name="acme_requires_it")
def acme_requires_it_fixture(acme: Organization) -> Organization:
    Organization.objects.filter(id=acme.id).update(require_second_factor=True)
    return acme


def test_an_owner_requires_a_second_factor_of_every_member(alice_client, acme):
    response = alice_client.post(RULE, {"require_second_factor": "on"})
    assert response.status_code == 302
    acme.refresh_from_db()
    assert acme.require_second_factor


def test_a_member_cannot_change_the_rule(bob_client, acme):
    assert bob_client.post(RULE, {"require_second_factor": "on"}).status_code == 403
    acme.refresh_from_db()
    assert not acme.require_second_factor


def test_it_audits_the_rule_changed(alice_client, acme):
    alice_client.post(RULE, {"require_second_factor": "on"})
    assert AuditRecord.objects.filter(action=PanelAction.ORGANIZATION_SECOND_FACTOR).exists()


def test_a_member_without_a_factor_is_sent_to_add_one(acme_requires_it, bob_client):
    for page in ("/panel/keys/", "/panel/servers/", "/panel/webhooks/", "/accounts/sessions/"):
        response = bob_client.get(page)
        assert (response.status_code, response["Location"]) == (302, SECURITY), page


def test_a_member_without_a_factor_can_still_add_one(acme_requires_it, bob_client):
    page = bob_client.get("/accounts/security/totp/").content.decode()
    bob_client.post("/accounts/security/totp/", {"code": code_of(secret_on(page))})
    assert bob_client.get("/panel/keys/").status_code == 200


def test_members_of_other_organizations_are_not_asked(acme_requires_it, charlie_client):
    assert charlie_client.get("/panel/keys/").status_code == 200


@pytest.fixture(name="admin_requires_it")
def admin_requires_it_fixture(settings) -> None:
    settings.ADMIN_REQUIRE_2FA = True


def test_staff_without_a_factor_are_sent_to_add_one_for_the_admin(admin_requires_it, staff):
    client = Client()
    client.force_login(staff)
    response = client.get("/admin/")
    assert (response.status_code, response["Location"]) == (302, SECURITY)


def test_staff_signed_in_with_a_code_reach_the_admin(admin_requires_it, staff):
    client = Client()
    with freeze_time("2026-12-01 10:00:00") as clock:
        client.force_login(staff)
        secret, _ = enrol_totp(client)
        client.post("/accounts/logout/")
        clock.tick(30)
        client.post("/admin/login/", {"username": staff.email, "password": "staff-pw-123"})
        client.post("/accounts/login/second-factor/", {"code": code_of(secret)})
        assert client.get("/admin/").status_code == 200


def test_a_staff_session_without_the_code_must_sign_in_again(admin_requires_it, staff):
    with freeze_time("2026-12-01 10:00:00"):
        enrolment = Client()
        enrolment.force_login(staff)
        enrol_totp(enrolment)
    older = Client()
    older.force_login(User.objects.get(pk=staff.pk))  # as a session from before the factor
    response = older.get("/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_the_admin_rule_can_be_turned_off(settings, staff_client):
    settings.ADMIN_REQUIRE_2FA = False
    assert staff_client.get("/admin/").status_code == 200


def _admin_rule_with(**values: str) -> bool:
    """ADMIN_REQUIRE_2FA as the service reads it at start, in an environment of `values`."""
    env = base_environment(SECRET_KEY=secrets.token_urlsafe(50), **values)
    if "ADMIN_REQUIRE_2FA" not in values:
        env.pop("ADMIN_REQUIRE_2FA", None)
    code = "import django; django.setup(); from django.conf import settings as s; "
    done = python(env, "-c", code + "print(s.ADMIN_REQUIRE_2FA)")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() == "True"


def test_the_admin_rule_is_on_by_default_and_off_in_debug():
    assert _admin_rule_with() is True
    assert _admin_rule_with(DEBUG="true") is False
    assert _admin_rule_with(ADMIN_REQUIRE_2FA="false") is False


def test_staff_in_no_organization_find_their_factor_changes_in_the_admins_history(staff):
    client = Client()
    client.force_login(staff)
    with freeze_time("2026-12-01 10:00:00"):
        enrol_totp(client)
    entries = LogEntry.objects.filter(user=staff, object_id=str(staff.pk))
    messages = [entry.change_message for entry in entries]
    assert any(message.startswith("mfa.totp_add") for message in messages), messages
