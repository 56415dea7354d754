"""The panel's key pages: list, create (key shown once), rotate, delete, organization switch."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from freezegun import freeze_time

from accounts.models import ApiKey
from accounts.services import api_key_create, api_key_revoke, member_add
from audit.actors import Actor
from audit.models import AuditRecord, Source
from audit.services import PanelContext
from tests.conftest import API, client_for, error_of

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


KEYS = "/panel/keys/"
NEW = "/panel/keys/new"
SHOWN_KEY = re.compile(r'<code id="new-api-key">(gsk_[0-9A-Za-z]{8}_[0-9A-Za-z]{43})</code>')


def shown_key(response) -> str:
    matches = SHOWN_KEY.findall(response.content.decode())
    assert len(matches) == 1, response.content.decode()
    return matches[0]


def key_id_of(full_key: str) -> str:
    return full_key[4:12]


def create(client: Client, **fields) -> object:
    data = {"name": "ci-deployer", "scopes": ["servers:read"], **fields}
    return client.post(NEW, data)


# The list


def test_it_lists_only_the_current_organizations_keys(alice_client, make_key, charlie):
    make_key(name="acme-ci")
    make_key(name="globex-ci", membership=charlie)
    response = alice_client.get(KEYS)
    assert response.status_code == 200
    assert "acme-ci" in response.content.decode()
    assert "globex-ci" not in response.content.decode()


def test_it_shows_all_servers_when_a_key_has_no_restriction(alice_client, make_key):
    make_key(["servers:read"])
    assert "all servers" in alice_client.get(KEYS).content.decode()


def test_it_marks_unrecognized_scopes_on_the_list(alice_client, make_key):
    make_key(["sevrers:read"])
    page = alice_client.get(KEYS).content.decode()
    assert "unrecognized" in page
    assert "did you mean servers:read?" in page


def test_it_shows_a_rotated_key_with_its_successor(alice_client, make_key):
    key = make_key(["servers:read"])
    new_key = shown_key(alice_client.post(f"{KEYS}{key.key_id}/rotate", {"grace_hours": "24"}))
    assert f"rotated → <code>{key_id_of(new_key)}</code>" in alice_client.get(KEYS).content.decode()


def test_it_sends_anonymous_visitors_to_the_login_page(client, alice):
    response = client.get(KEYS)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_it_shows_a_friendly_page_to_a_person_without_organization(client, django_user_model):
    loner = django_user_model.objects.create_user(email="loner@example.test", password="pw-12345")
    client.force_login(loner)
    response = client.get(KEYS)
    assert response.status_code == 403
    assert "not in an organization" in response.content.decode()


# Creating


def test_it_shows_the_new_key_once_and_it_authenticates(alice_client):
    response = create(alice_client)
    assert response.status_code == 200
    full_key = shown_key(response)
    assert len(full_key) == 56
    api = client_for(full_key).get(f"{API}/account/keys/current")
    assert api.status_code == 200, api.content
    assert api.json()["name"] == "ci-deployer"


def test_it_never_shows_the_key_on_the_list_page_afterwards(alice_client):
    full_key = shown_key(create(alice_client))
    page = alice_client.get(KEYS).content.decode()
    assert key_id_of(full_key) in page
    assert full_key not in page
    assert full_key[13:] not in page


def test_it_forbids_caching_the_page_that_shows_the_key(alice_client):
    response = create(alice_client)
    assert "no-store" in response["Cache-Control"]


def test_it_offers_only_the_scopes_the_creator_holds(bob_client):
    page = bob_client.get(NEW).content.decode()
    assert 'value="servers:read"' in page
    assert 'value="keys:revoke"' not in page


def test_it_lets_a_member_grant_scopes_they_hold(bob_client):
    response = create(bob_client, scopes=["servers:read", "keys:read"])
    assert response.status_code == 200
    assert ApiKey.objects.get().scopes == ["servers:read", "keys:read"]


def test_it_refuses_a_scope_beyond_the_creators_with_422(bob_client):
    response = create(bob_client, scopes=["servers:read", "keys:revoke"])
    assert response.status_code == 422
    assert "scope_exceeds_permissions" in response.content.decode()
    assert not ApiKey.objects.exists()


def test_it_counts_a_catalogue_scope_typed_as_extra_against_the_creator(bob_client):
    response = create(bob_client, extra_scopes="audit:read")
    assert response.status_code == 422
    assert not ApiKey.objects.exists()


def test_it_warns_about_an_unrecognized_scope_and_suggests_the_closest(alice_client):
    response = create(alice_client, extra_scopes="sevrers:read, audit:read")
    assert response.status_code == 200
    assert "sevrers:read — did you mean servers:read?" in response.content.decode()
    assert ApiKey.objects.get().scopes == ["servers:read", "sevrers:read", "audit:read"]


def test_it_accepts_an_unrecognized_scope_posted_as_a_checkbox_value(alice_client):
    response = create(alice_client, scopes=["servers:read", "made:up"])
    assert response.status_code == 200
    assert "made:up — no known scope looks like it." in response.content.decode()
    assert ApiKey.objects.get().scopes == ["servers:read", "made:up"]


@freeze_time("2026-11-22 10:00:00")
def test_it_defaults_the_expiry_to_90_days(alice_client):
    create(alice_client, expiry_days="")
    assert ApiKey.objects.get().expires_at == timezone.now() + timedelta(days=90)


@freeze_time("2026-11-22 10:00:00")
def test_it_expires_the_key_after_the_days_asked(alice_client):
    create(alice_client, expiry_days="365")
    assert ApiKey.objects.get().expires_at == timezone.now() + timedelta(days=365)


def test_it_creates_a_key_without_expiry_when_asked_never(alice_client):
    response = create(alice_client, expiry_days="never")
    assert response.status_code == 200
    assert ApiKey.objects.get().expires_at is None


@pytest.mark.parametrize("expiry", ["366", "0", "-1", "soon", "1.5"])
def test_it_refuses_an_expiry_outside_1_to_365_days(alice_client, expiry):
    response = create(alice_client, expiry_days=expiry)
    assert response.status_code == 400
    assert not ApiKey.objects.exists()


def test_it_stores_the_server_restrictions(alice_client, acme_server, acme_other_server):
    response = create(alice_client, servers=[acme_server.id])
    assert response.status_code == 200
    assert ApiKey.objects.get().server_restrictions == [acme_server.id]


def test_it_refuses_a_server_of_another_organization(alice_client, globex_server):
    response = create(alice_client, servers=[globex_server.id])
    assert response.status_code == 400
    assert not ApiKey.objects.exists()


def test_it_stores_the_allowed_ips(alice_client):
    create(alice_client, allowed_ips="203.0.113.0/24,\n198.51.100.7 2001:db8::/32")
    assert ApiKey.objects.get().allowed_ips == [
        "203.0.113.0/24",
        "198.51.100.7/32",
        "2001:db8::/32",
    ]


def test_it_refuses_a_bad_cidr(alice_client):
    response = create(alice_client, allowed_ips="203.0.113.0/33")
    assert response.status_code == 400
    assert "203.0.113.0/33" in response.content.decode()
    assert not ApiKey.objects.exists()


def test_it_refuses_a_duplicate_name(alice_client, make_key):
    make_key(name="ci-deployer")
    response = create(alice_client, name="ci-deployer")
    assert response.status_code == 400
    assert "already exists" in response.content.decode()
    assert ApiKey.objects.count() == 1


def test_it_refuses_an_empty_name(alice_client):
    response = create(alice_client, name="   ")
    assert response.status_code == 400
    assert not ApiKey.objects.exists()


def test_it_points_at_every_mistake_at_once(alice_client):
    response = create(alice_client, name="", expiry_days="400", allowed_ips="10.0.0.0/99")
    page = response.content.decode()
    assert response.status_code == 400
    assert "A key needs a name." in page
    assert "from 1 to 365" in page
    assert "10.0.0.0/99" in page


# Rotating


def test_it_asks_for_the_grace_period_before_rotating(alice_client, make_key):
    key = make_key()
    response = alice_client.get(f"{KEYS}{key.key_id}/rotate")
    assert response.status_code == 200
    assert 'name="grace_hours" value="24"' in response.content.decode()
    assert ApiKey.objects.get(key_id=key.key_id).replaced_by is None


@freeze_time("2026-11-22 10:00:00")
def test_it_rotates_and_the_old_key_works_until_the_grace_ends(alice_client, make_key):
    key = make_key(["servers:read"])
    response = alice_client.post(f"{KEYS}{key.key_id}/rotate", {"grace_hours": "2"})
    assert response.status_code == 200
    new_key = shown_key(response)
    old = ApiKey.objects.get(key_id=key.key_id)
    assert old.replaced_by == key_id_of(new_key)
    assert old.expires_at == timezone.now() + timedelta(hours=2)
    assert client_for(new_key).get(f"{API}/account/keys/current").status_code == 200


@freeze_time("2026-11-22 10:00:00")
def test_it_gives_24_hours_of_grace_by_default(alice_client, make_key):
    key = make_key()
    alice_client.post(f"{KEYS}{key.key_id}/rotate", {})
    old = ApiKey.objects.get(key_id=key.key_id)
    assert old.expires_at == timezone.now() + timedelta(hours=24)


def test_it_stops_the_old_key_at_once_with_no_grace(alice_client, make_key):
    key = make_key(["servers:read"])
    alice_client.post(f"{KEYS}{key.key_id}/rotate", {"grace_hours": "0"})
    response = client_for(key).get(f"{API}/account/keys/current")
    assert response.status_code == 401
    assert error_of(response)["code"] == "token_expired"


@pytest.mark.parametrize("grace", ["169", "-1", "a day"])
def test_it_refuses_a_grace_outside_0_to_168_hours(alice_client, make_key, grace):
    key = make_key()
    response = alice_client.post(f"{KEYS}{key.key_id}/rotate", {"grace_hours": grace})
    assert response.status_code == 400
    assert ApiKey.objects.get(key_id=key.key_id).replaced_by is None


def test_it_refuses_to_rotate_a_revoked_key(alice_client, make_key):
    key = make_key()
    api_key_revoke(key=ApiKey.objects.get(key_id=key.key_id), actor=TEST_ACTOR)
    response = alice_client.post(f"{KEYS}{key.key_id}/rotate", {"grace_hours": "1"})
    assert response.status_code == 409
    assert ApiKey.objects.count() == 1


def test_it_refuses_to_rotate_a_key_twice(alice_client, make_key):
    key = make_key()
    alice_client.post(f"{KEYS}{key.key_id}/rotate", {"grace_hours": "1"})
    response = alice_client.post(f"{KEYS}{key.key_id}/rotate", {"grace_hours": "1"})
    assert response.status_code == 409
    assert ApiKey.objects.count() == 2


# Deleting


def test_it_asks_before_deleting(alice_client, make_key):
    key = make_key()
    response = alice_client.get(f"{KEYS}{key.key_id}/delete")
    assert response.status_code == 200
    assert ApiKey.objects.get(key_id=key.key_id).revoked_at is None


def test_it_revokes_on_delete_and_the_api_then_answers_token_revoked(alice_client, make_key):
    key = make_key(["servers:read"])
    response = alice_client.post(f"{KEYS}{key.key_id}/delete")
    assert response.status_code == 302
    assert response["Location"] == KEYS
    api = client_for(key).get(f"{API}/account/keys/current")
    assert api.status_code == 401
    assert error_of(api)["code"] == "token_revoked"


def test_it_confirms_the_deletion_on_the_list(alice_client, make_key):
    key = make_key(name="old-ci")
    response = alice_client.post(f"{KEYS}{key.key_id}/delete", follow=True)
    assert "“old-ci”" in response.content.decode()
    assert "revoked" in response.content.decode()


# Boundaries


@pytest.mark.parametrize(
    ("method", "action"),
    [("get", "rotate"), ("post", "rotate"), ("get", "delete"), ("post", "delete")],
)
def test_it_answers_404_for_another_organizations_key(
    alice_client, make_key, charlie, method, action
):
    key = make_key(membership=charlie)
    response = getattr(alice_client, method)(f"{KEYS}{key.key_id}/{action}")
    assert response.status_code == 404
    foreign = ApiKey.objects.get(key_id=key.key_id)
    assert foreign.revoked_at is None
    assert foreign.replaced_by is None


def test_it_enforces_csrf(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice.user)
    response = client.post(NEW, {"name": "ci", "scopes": ["servers:read"]})
    assert response.status_code == 403
    assert not ApiKey.objects.exists()


def test_it_records_panel_actions_in_the_audit_trail(alice_client):
    full_key = shown_key(create(alice_client))
    rotated = shown_key(alice_client.post(f"{KEYS}{key_id_of(full_key)}/rotate", {}))
    alice_client.post(f"{KEYS}{key_id_of(rotated)}/delete")
    records = AuditRecord.objects.order_by("occurred_at", "id")
    assert [r.action for r in records] == ["key.create", "key.rotate", "key.revoke"]
    assert {(r.source, r.actor_email) for r in records} == {(Source.PANEL, "alice@acme.test")}
    assert records[2].path == f"{KEYS}{key_id_of(rotated)}/delete"


# The organization switcher


def test_it_refuses_to_switch_to_an_organization_the_person_is_not_in(
    alice_client, make_key, globex, charlie
):
    make_key(name="globex-ci", membership=charlie)
    response = alice_client.post("/panel/switch-organization/", {"organization": globex.id})
    assert response.status_code == 403
    assert "globex-ci" not in alice_client.get(KEYS).content.decode()


def test_it_switches_to_another_organization_of_the_person(alice_client, alice, globex, charlie):
    member_add(
        organization=globex, email=alice.user.email, password=None, member_scopes=["keys:read"]
    )
    api_key_create(
        membership=charlie,
        name="globex-ci",
        actor=Actor.person(PanelContext(user_email="c@globex.test")),
    )
    response = alice_client.post(
        "/panel/switch-organization/", {"organization": globex.id, "next": KEYS}
    )
    assert response.status_code == 302
    assert "globex-ci" in alice_client.get(KEYS).content.decode()


def test_it_does_not_follow_a_foreign_next_address_after_switching(alice_client, alice, globex):
    member_add(organization=globex, email=alice.user.email, password=None)
    response = alice_client.post(
        "/panel/switch-organization/",
        {"organization": globex.id, "next": "https://evil.example/"},
    )
    assert response["Location"] == KEYS
