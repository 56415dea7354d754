"""One permission model for the panel: every view declares what it needs, and a view that
declares nothing is refused."""

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path

from accounts.panel.access import AllOf, Open, ReadAndChange, permission_of
from accounts.scopes import Scope
from gshost import urls as gshost_urls
from tests.panel.routes import panel_patterns


def test_the_walk_finds_the_panel_of_every_app() -> None:
    routes = [p.route for p in panel_patterns()]
    for prefix in (
        "panel/keys/",
        "panel/audit/",
        "panel/webhooks/",
        "panel/servers/",
        "accounts/login/",
    ):
        assert any(r.startswith(prefix) for r in routes), prefix


@pytest.mark.parametrize("pattern", panel_patterns(), ids=lambda p: p.route)
def test_every_panel_view_declares_a_permission(pattern) -> None:
    permission = permission_of(pattern.callback)
    assert isinstance(permission, (Scope, Open, ReadAndChange, AllOf)), pattern.route


def undeclared_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("should never be served")


urlpatterns = [path("panel/undeclared/", undeclared_view), *gshost_urls.urlpatterns]


@pytest.mark.urls("tests.panel.test_panel_permissions")
def test_it_refuses_a_panel_view_that_declares_nothing(client: Client, alice) -> None:
    client.force_login(alice.user)
    response = client.get("/panel/undeclared/")
    assert response.status_code == 403
    assert "should never be served" not in response.content.decode()


@pytest.mark.parametrize(
    ("route", "permission"),
    [
        ("panel/audit/", Scope.AUDIT_READ),
        ("panel/servers/$", Scope.SERVERS_READ),
        ("panel/servers/states/?$", Scope.SERVERS_READ),
        ("panel/keys/", Open.MEMBER_BY_SERVICE_RULE),
        (
            "panel/servers/(?P<server_id>srv_[0-9A-Za-z]{1,40})/settings/?$",
            ReadAndChange(read=Scope.SERVERS_READ, change=Scope.SERVERS_POWER),
        ),
        (
            "panel/servers/(?P<server_id>srv_[0-9A-Za-z]{1,40})/config-events/?$",
            ReadAndChange(read=Scope.SERVERS_READ, change=Scope.SERVERS_POWER),
        ),
        ("accounts/login/", Open.PUBLIC),
    ],
)
def test_it_declares_the_scope_the_api_would_ask(route: str, permission: object) -> None:
    declared = {p.route: permission_of(p.callback) for p in panel_patterns()}
    assert declared[route] == permission


def test_a_read_and_change_page_is_shown_with_the_read_scope_and_posted_to_with_both() -> None:
    page = ReadAndChange(read=Scope.SERVERS_READ, change=Scope.SERVERS_POWER)
    assert page.scopes_for("GET") == page.scopes_for("HEAD") == (Scope.SERVERS_READ,)
    assert page.scopes_for("POST") == (Scope.SERVERS_READ, Scope.SERVERS_POWER)
