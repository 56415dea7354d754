"""Where people see that a key was revoked because it leaked: the panel's key list and key
page, the panel's audit page, and (read-only) the staff admin."""

import pytest
from django.contrib.admin.utils import quote
from django.test import RequestFactory

from accounts.leaks import leak_context, leaked_token_handle
from accounts.models import ApiKey, LeakSource

FOUND_AT = "https://github.com/octo/app/blob/main/.env"


@pytest.fixture
def leaked(make_key):
    key = make_key(name="ci-deployer")
    request = RequestFactory().post("/integrations/secret-scanning/github")
    leaked_token_handle(
        token=key.full_key,
        source=LeakSource.GITHUB_SECRET_SCANNING,
        context=leak_context(request, FOUND_AT),
    )
    return key


def test_the_key_list_shows_the_reason_and_where_it_was_found(alice_client, leaked):
    page = alice_client.get("/panel/keys/").content.decode()
    assert "leaked: revoked by gshost (GitHub secret scanning)" in page
    assert FOUND_AT in page


def test_the_key_page_shows_the_reason_and_where_it_was_found(alice_client, leaked):
    page = alice_client.get(f"/panel/keys/{leaked.key_id}/delete").content.decode()
    assert "because it was found in public" in page
    assert '<dd class="leak-reason">Leaked</dd>' in page
    assert '<dd class="leak-source">GitHub secret scanning</dd>' in page
    assert f"<code>{FOUND_AT}</code>" in page


def test_a_key_revoked_by_a_person_shows_no_leak(alice_client, make_key):
    key = make_key()
    alice_client.post(f"/panel/keys/{key.key_id}/delete")
    assert "leaked" not in alice_client.get("/panel/keys/").content.decode()


def test_the_audit_page_shows_the_platforms_revocation_and_the_url(alice_client, leaked):
    page = alice_client.get("/panel/audit/").content.decode()
    assert "key.leak_revoked" in page
    assert f"gshost, on key <code>{leaked.key_id}</code>" in page
    assert FOUND_AT in page


def test_the_panel_shows_a_reported_url_as_text_only(alice_client, make_key):
    key = make_key()
    request = RequestFactory().post("/api/public/v1/keys/report-leaked")
    hostile = 'javascript:alert(1)//"><script>alert(2)</script>'
    leaked_token_handle(
        token=key.full_key, source=LeakSource.REPORT, context=leak_context(request, hostile)
    )
    for page in ["/panel/keys/", f"/panel/keys/{key.key_id}/delete", "/panel/audit/"]:
        content = alice_client.get(page).content.decode()
        assert "<script>alert(2)" not in content
        assert 'href="javascript:' not in content


def test_the_admin_shows_the_leak_read_only(staff_client, leaked):
    row = ApiKey.objects.get(key_id=leaked.key_id)
    page = staff_client.get(f"/admin/accounts/apikey/{quote(row.pk)}/change/").content.decode()
    assert FOUND_AT in page and "GitHub secret scanning" in page
    assert 'name="leak_url"' not in page  # shown, not editable
    listing = staff_client.get("/admin/accounts/apikey/?revoked_reason__exact=leaked")
    assert leaked.key_id in listing.content.decode()
