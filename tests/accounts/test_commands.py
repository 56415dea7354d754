"""The operations commands: createorg, addmember, createserver and demo."""

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import authenticate as django_authenticate
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import RequestFactory

from accounts.models import ApiKey, Membership, Organization, Role, User
from accounts.scopes import CATALOGUE
from servers.models import Server


def authenticate(**credentials: str) -> User | None:
    """Sign in as the login page does (django-axes needs the request)."""
    request = RequestFactory().post("/accounts/login/")
    return django_authenticate(request, **credentials)  # type: ignore[return-value]


DEMO_PASSWORD = "demo-password"


def run(*args: str, **options: Any) -> str:
    out = StringIO()
    call_command(*args, stdout=out, **options)
    return out.getvalue()


def membership(slug: str, email: str) -> Membership:
    return Membership.objects.get(organization__slug=slug, user__email=email)


# createorg


def test_it_creates_an_organization_and_prints_its_id(db):
    out = run("createorg", "initech", "--name", "Initech")

    org_id = out.strip()
    assert org_id.startswith("org_")
    organization = Organization.objects.get(id=org_id)
    assert (organization.slug, organization.name) == ("initech", "Initech")


def test_it_refuses_a_duplicate_slug(acme):
    with pytest.raises(CommandError, match="already exists"):
        run("createorg", "acme", "--name", "Another Acme")

    assert Organization.objects.filter(slug="acme").count() == 1


def test_it_refuses_an_invalid_slug(db):
    with pytest.raises(CommandError, match="Invalid slug"):
        run("createorg", "not a slug!", "--name", "Nope")

    assert not Organization.objects.exists()


# addmember


def test_it_adds_an_owner_who_holds_every_scope(acme):
    out = run("addmember", "acme", "dave@acme.test", "--password", "dave-pw-123", "--owner")

    added = membership("acme", "dave@acme.test")
    assert added.role == Role.OWNER
    assert added.held_scopes == CATALOGUE
    assert "dave@acme.test" in out and "acme" in out and "owner" in out


def test_it_stores_a_members_scopes(acme):
    run(
        "addmember",
        "acme",
        "erin@acme.test",
        "--password",
        "erin-pw-123",
        "--scopes",
        "servers:read, keys:read ,audit:read",
    )

    added = membership("acme", "erin@acme.test")
    assert added.role == Role.MEMBER
    assert added.scopes == ["servers:read", "keys:read", "audit:read"]


def test_it_sets_the_members_password(acme):
    run("addmember", "acme", "erin@acme.test", "--password", "erin-pw-123")

    assert authenticate(username="erin@acme.test", password="erin-pw-123") is not None


def test_it_refuses_an_unknown_scope_and_suggests_the_closest(acme):
    with pytest.raises(CommandError, match=r"'sevrers:read'.*did you mean 'servers:read'"):
        run(
            "addmember",
            "acme",
            "erin@acme.test",
            "--password",
            "pw-123456",
            "--scopes",
            "sevrers:read",
        )

    assert not User.objects.filter(email="erin@acme.test").exists()


def test_it_refuses_owner_together_with_scopes(acme):
    with pytest.raises(CommandError, match="not allowed with"):
        run(
            "addmember",
            "acme",
            "erin@acme.test",
            "--password",
            "pw-123456",
            "--owner",
            "--scopes",
            "servers:read",
        )

    assert not User.objects.filter(email="erin@acme.test").exists()


def test_it_updates_an_existing_member(bob):
    out = run("addmember", "acme", "bob@acme.test", "--password", "bob-new-pw", "--owner")

    assert membership("acme", "bob@acme.test").role == Role.OWNER
    assert Membership.objects.filter(user__email="bob@acme.test").count() == 1
    assert authenticate(username="bob@acme.test", password="bob-new-pw") is not None
    assert "Updated" in out


def test_it_refuses_addmember_for_an_unknown_organization(db):
    with pytest.raises(CommandError, match="No organization"):
        run("addmember", "nowhere", "erin@acme.test", "--password", "pw-123456", "--owner")


# createserver


def test_it_creates_a_stopped_minecraft_server_and_prints_its_id(acme):
    out = run("createserver", "acme", "Skyblock")

    server = Server.objects.get(id=out.strip())
    assert server.id.startswith("srv_")
    assert (server.organization_id, server.name) == (acme.id, "Skyblock")
    assert (server.game, server.state) == ("minecraft", "stopped")


def test_it_creates_a_server_of_the_game_asked(acme):
    out = run("createserver", "acme", "Karts", "--game", "custom")

    assert Server.objects.get(id=out.strip()).game == "custom"


def test_it_refuses_createserver_for_an_unknown_organization(db):
    with pytest.raises(CommandError, match="No organization"):
        run("createserver", "nowhere", "Skyblock")

    assert not Server.objects.exists()


# demo


def test_it_creates_the_demo_organizations(db):
    run("demo")

    names = dict(Organization.objects.values_list("slug", "name"))
    assert names == {"demo": "Demo Gaming", "rival": "Rival Hosting"}


def test_it_creates_demo_logins_that_work_with_the_printed_password(db):
    out = run("demo")

    assert f"owner@demo.gshost.test / {DEMO_PASSWORD}" in out
    owner = authenticate(username="owner@demo.gshost.test", password=DEMO_PASSWORD)
    assert owner is not None
    assert membership("demo", "owner@demo.gshost.test").role == Role.OWNER
    assert authenticate(username="owner@rival.gshost.test", password=DEMO_PASSWORD) is not None


def test_it_creates_a_demo_member_with_read_scopes(db):
    run("demo")

    member = membership("demo", "member@demo.gshost.test")
    assert member.role == Role.MEMBER
    assert set(member.scopes) == {"servers:read", "keys:read", "audit:read"}
    assert authenticate(username="member@demo.gshost.test", password=DEMO_PASSWORD) is not None


def test_it_creates_a_demo_superuser(db):
    run("demo")

    admin = authenticate(username="admin@demo.gshost.test", password=DEMO_PASSWORD)
    assert admin is not None
    assert admin.is_staff and admin.is_superuser


def test_it_creates_demo_servers_of_two_games_and_prints_them(db):
    out = run("demo")

    servers = Server.objects.filter(organization__slug="demo")
    assert set(servers.values_list("name", flat=True)) == {"Survival", "Creative", "Racing league"}
    assert set(servers.values_list("game", flat=True)) == {"minecraft", "custom"}
    assert Server.objects.filter(organization__slug="rival").count() == 1
    for server in Server.objects.all():
        assert server.id in out and server.name in out


def test_it_prints_the_panel_url_from_the_environment(db, monkeypatch):
    monkeypatch.setenv("PANEL_URL", "https://panel.example.test/panel/keys/")

    out = run("demo")

    assert "https://panel.example.test/panel/keys/" in out


def test_it_creates_no_api_keys(db):
    run("demo")

    assert not ApiKey.objects.exists()


def test_it_creates_nothing_twice_when_run_again(db):
    run("demo")
    counts = [model.objects.count() for model in (Organization, User, Membership, Server)]
    first_ids = set(Server.objects.values_list("id", flat=True))

    out = run("demo")

    assert [model.objects.count() for model in (Organization, User, Membership, Server)] == counts
    assert set(Server.objects.values_list("id", flat=True)) == first_ids
    assert authenticate(username="owner@demo.gshost.test", password=DEMO_PASSWORD) is not None
    assert all(server_id in out for server_id in first_ids)


def test_it_prints_the_local_panel_url_by_default(db, monkeypatch):
    monkeypatch.delenv("PANEL_URL", raising=False)

    out = run("demo")

    assert "http://127.0.0.1:8000/panel/keys/" in out
