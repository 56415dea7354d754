"""Staff admin: keys are read-only and never show a secret; audit records cannot be edited."""

import pytest
from django.contrib.admin.utils import quote

from accounts.models import ApiKey, User
from audit.models import AuditRecord, Source
from audit.services import PanelAction, PanelContext, audit_panel_action
from tests.admin_forms import submitted


def test_it_never_shows_the_secret_hash_or_the_key(staff_client, make_key):
    issued = make_key(["servers:read"])
    key = ApiKey.objects.get(key_id=issued.key_id)
    for url in ["/admin/accounts/apikey/", f"/admin/accounts/apikey/{quote(key.pk)}/change/"]:
        page = staff_client.get(url).content.decode()
        assert issued.key_id in page, url
        assert key.secret_hash not in page, url
        assert issued.full_key.split("_")[2] not in page, url


def test_it_offers_no_way_to_add_a_key(staff_client, alice):
    assert staff_client.get("/admin/accounts/apikey/add/").status_code == 403


def test_it_offers_no_way_to_delete_a_key(staff_client, make_key):
    key = ApiKey.objects.get(key_id=make_key().key_id)
    assert staff_client.get(f"/admin/accounts/apikey/{quote(key.pk)}/delete/").status_code == 403


def test_it_revokes_the_selected_keys(staff_client, make_key):
    kept, revoked = make_key(), make_key()
    selected = ApiKey.objects.get(key_id=revoked.key_id)
    response = staff_client.post(
        "/admin/accounts/apikey/",
        {"action": "revoke_selected", "_selected_action": [selected.pk]},
    )
    assert response.status_code == 302
    assert ApiKey.objects.get(key_id=revoked.key_id).revoked_at is not None
    assert ApiKey.objects.get(key_id=kept.key_id).revoked_at is None


def test_it_audits_an_admin_revocation_as_the_staff_member(staff_client, make_key):
    key = ApiKey.objects.get(key_id=make_key().key_id)
    staff_client.post(
        "/admin/accounts/apikey/", {"action": "revoke_selected", "_selected_action": [key.pk]}
    )
    record = AuditRecord.objects.get(action=PanelAction.KEY_REVOKE)
    assert record.actor_email == "staff@gshost.test"


def test_it_offers_no_add_change_or_delete_for_audit_records(staff_client, acme):
    record = audit_panel_action(
        organization_id=acme.id,
        context=PanelContext(user_email="alice@acme.test"),
        action=PanelAction.KEY_CREATE,
    )
    assert staff_client.get("/admin/audit/auditrecord/add/").status_code == 403
    assert (
        staff_client.get(f"/admin/audit/auditrecord/{quote(record.pk)}/delete/").status_code == 403
    )
    page = staff_client.get(f"/admin/audit/auditrecord/{quote(record.pk)}/change/")
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()
    assert AuditRecord.objects.filter(source=Source.PANEL).count() == 1


def test_it_adds_a_user_by_email(staff_client):
    response = staff_client.post(
        "/admin/accounts/user/add/",
        {
            "email": "New.Person@Example.test",
            "usable_password": "true",
            "password1": "a-long-pass-phrase",
            "password2": "a-long-pass-phrase",
        },
    )
    assert response.status_code == 302, response.content.decode()
    user = User.objects.get(email="new.person@example.test")
    assert user.check_password("a-long-pass-phrase")


@pytest.mark.parametrize(
    "url",
    [
        "/admin/",
        "/admin/accounts/organization/",
        "/admin/accounts/user/",
        "/admin/accounts/membership/",
        "/admin/accounts/membership/add/",
        "/admin/servers/server/",
        "/admin/servers/server/add/",
        "/admin/audit/auditrecord/",
    ],
)
def test_it_opens_the_admin_pages(staff_client, alice, acme_server, url):
    assert staff_client.get(url).status_code == 200


def test_it_opens_the_change_pages(staff_client, alice, acme, acme_server):
    for url in [
        f"/admin/accounts/organization/{quote(acme.pk)}/change/",
        f"/admin/accounts/user/{quote(alice.user.pk)}/change/",
        f"/admin/accounts/membership/{quote(alice.pk)}/change/",
        f"/admin/servers/server/{quote(acme_server.pk)}/change/",
    ]:
        assert staff_client.get(url).status_code == 200, url


def test_it_edits_a_members_scopes_with_checkboxes(staff_client, bob):
    response = staff_client.post(
        f"/admin/accounts/membership/{quote(bob.pk)}/change/",
        {
            "user": bob.user_id,
            "organization": bob.organization_id,
            "role": "member",
            "scopes": ["servers:read", "audit:read"],
        },
    )
    assert response.status_code == 302, response.content.decode()
    bob.refresh_from_db()
    assert bob.scopes == ["servers:read", "audit:read"]


def _organization_page_with(staff_client, acme, change) -> int:  # type: ignore[no-untyped-def]
    """Submit the organization's admin page as shown, after `change` edits its fields."""
    url = f"/admin/accounts/organization/{quote(acme.pk)}/change/"
    fields = submitted(staff_client.get(url).content.decode(), 'id="organization_form"')
    change(fields)
    return int(staff_client.post(url, fields).status_code)


def _inline_row_of(fields: dict[str, list[str]], membership) -> str:  # type: ignore[no-untyped-def]
    """The prefix of the membership's row in the page's inline form."""
    ids = (
        name
        for name, value in fields.items()
        if name.endswith("-id") and value == [str(membership.pk)]
    )
    return next(ids).removesuffix("-id")


def _remove(fields: dict[str, list[str]], row: str) -> None:
    fields[f"{row}-DELETE"] = ["on"]


def _narrow(fields: dict[str, list[str]], row: str) -> None:
    fields[f"{row}-scopes"] = ['["servers:read"]']


@pytest.mark.parametrize(
    ("edit", "scopes_after"),
    [(_remove, None), (_narrow, ["servers:read"])],
    ids=["removed", "narrowed"],
)
def test_a_member_removed_or_narrowed_on_the_organizations_page_loses_their_sockets(
    staff_client, acme, acme_server, alice, bob, withdrawn, django_capture_on_commit_callbacks,
    edit, scopes_after,
):  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        assert (
            _organization_page_with(staff_client, acme, lambda f: edit(f, _inline_row_of(f, bob)))
            == 302
        )
    left = acme.memberships.filter(user=bob.user).first()
    assert (left.scopes if left else None) == scopes_after
    (withdrawal,) = withdrawn
    assert withdrawal.person_ids == frozenset({str(bob.user_id)})
    assert withdrawal.server_ids == frozenset({acme_server.id})
