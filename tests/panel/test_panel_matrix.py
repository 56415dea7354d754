"""Every panel route and action against every kind of person: the status each gets, and for
every refusal, proof that nothing changed.

The people: alice owns Acme; "with" is an Acme member holding exactly what the route needs;
"without" is an Acme member holding every scope except that one; charlie owns Globex. The
path ids always name Acme's objects.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.db.models import Model, QuerySet
from django.test import Client
from django.urls import resolve
from django.utils import timezone

from accounts.models import ApiKey, Membership, Organization
from accounts.scopes import CATALOGUE, Scope
from accounts.services import api_key_create, member_add
from audit.actors import Actor
from audit.models import AuditRecord
from audit.services import PanelContext
from servers.backups.jobs import backup_create
from servers.game.config_events import config_event_create
from servers.models import (
    Backup,
    ConfigEvent,
    ConsoleCommand,
    Job,
    Schedule,
    ScheduleRun,
    Server,
    SettingChange,
)
from servers.schedules import ScheduleInput, schedule_create
from tests.panel.routes import panel_patterns
from tests.webhooks.webhook_fixtures import make_delivery
from webhooks.models import Delivery, DeliveryStatus, Webhook
from webhooks.services import webhook_create

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


KEY_RULE = "key rule"  # key list, create, rotate, delete: the key service's own rule
SIGNED_IN = "signed in"
OWNER = "owner"  # an owner of the organization the person acts in
KEY_SCOPES = ["servers:read", "audit:read"]


@dataclass(frozen=True)
class PanelRoute:
    method: str
    path: str
    needs: str
    data: dict[str, Any] = field(default_factory=dict)
    ok: int = 200
    also: tuple[str, ...] = ()  # what "with" also holds: the page's own scope
    organization_wide: bool = False  # no Acme id in the path

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.path}"


S = "/panel/servers/{server}"
SCHEDULE = {"cron": "0 3 * * *", "command": "save-all", "alert_after_missed": "3"}
SETTINGS = {
    "max_players": "20",
    "motd": "Hello",
    "difficulty": "hard",
    "pvp": "true",
    "view_distance": "10",
}
W = "/panel/webhooks/{webhook}"
COMMAND = (Scope.CONSOLE_WRITE.value,)  # a schedule's command is a console command
ROUTES = [
    PanelRoute("get", "/panel/keys/", KEY_RULE, organization_wide=True),
    PanelRoute("get", "/panel/keys/new", KEY_RULE, organization_wide=True),
    PanelRoute(
        "post",
        "/panel/keys/new",
        KEY_RULE,
        {"name": "new-key", "scopes": KEY_SCOPES},
        organization_wide=True,
    ),
    PanelRoute("get", "/panel/keys/{key}/rotate", KEY_RULE),
    PanelRoute("post", "/panel/keys/{key}/rotate", KEY_RULE, {"grace_hours": "0"}),
    PanelRoute("get", "/panel/keys/{key}/delete", KEY_RULE),
    PanelRoute("post", "/panel/keys/{key}/delete", KEY_RULE, ok=302),
    PanelRoute("get", "/panel/audit/", Scope.AUDIT_READ, organization_wide=True),
    PanelRoute("get", "/panel/webhooks/", Scope.WEBHOOKS_READ, organization_wide=True),
    PanelRoute("get", "/panel/webhooks/new", Scope.WEBHOOKS_WRITE, organization_wide=True),
    PanelRoute(
        "post",
        "/panel/webhooks/new",
        Scope.WEBHOOKS_WRITE,
        {"url": "https://hooks.example.com/new", "events": ["server.started"]},
        organization_wide=True,
    ),
    PanelRoute("get", W + "/edit", Scope.WEBHOOKS_MANAGE),
    PanelRoute(
        "post",
        W + "/edit",
        Scope.WEBHOOKS_MANAGE,
        {"url": "https://hooks.example.com/edited", "events": ["server.stopped"]},
        ok=302,
    ),
    PanelRoute("get", W + "/delete", Scope.WEBHOOKS_WRITE),
    PanelRoute("post", W + "/delete", Scope.WEBHOOKS_WRITE, ok=302),
    PanelRoute("post", W + "/test", Scope.WEBHOOKS_MANAGE),
    PanelRoute("get", W + "/secret/roll", Scope.WEBHOOKS_MANAGE),
    PanelRoute("post", W + "/secret/roll", Scope.WEBHOOKS_MANAGE, {"grace_hours": "24"}),
    PanelRoute("get", W + "/deliveries", Scope.WEBHOOKS_READ),
    PanelRoute("get", W + "/deliveries/{delivery}", Scope.WEBHOOKS_READ),
    PanelRoute("post", W + "/deliveries/{delivery}/redeliver", Scope.WEBHOOKS_MANAGE, ok=302),
    PanelRoute("post", W + "/deliveries/redeliver-failed", Scope.WEBHOOKS_MANAGE, ok=302),
    PanelRoute("get", "/panel/servers/", Scope.SERVERS_READ, organization_wide=True),
    PanelRoute("get", "/panel/servers/states", Scope.SERVERS_READ, organization_wide=True),
    PanelRoute("get", S, Scope.SERVERS_READ),
    PanelRoute("post", S + "/power", Scope.SERVERS_POWER, {"action": "start"}, ok=302),
    PanelRoute("post", S + "/console", Scope.CONSOLE_WRITE, {"command": "say hi"}, ok=302),
    PanelRoute("post", S + "/crash-restarts", Scope.SERVERS_WRITE, {}, ok=302),
    PanelRoute("get", S + "/console/lines", Scope.SERVERS_READ),
    # A server of the simulated node: no live console there (an agent node's gives 201).
    PanelRoute("post", S + "/console/session", Scope.SERVERS_READ, ok=501),
    PanelRoute("get", S + "/schedules", Scope.SCHEDULES_READ),
    PanelRoute("get", S + "/schedules/new", Scope.SCHEDULES_EXECUTE, also=COMMAND),
    PanelRoute(
        "post",
        S + "/schedules/new",
        Scope.SCHEDULES_EXECUTE,
        {"name": "Nightly", "cron": "0 3 * * *", "command": "save-all", "alert_after_missed": "3"},
        ok=302,
        also=COMMAND,
    ),
    PanelRoute("get", S + "/schedules/{schedule}/edit", Scope.SCHEDULES_EXECUTE, also=COMMAND),
    PanelRoute(
        "post",
        S + "/schedules/{schedule}/edit",
        Scope.SCHEDULES_EXECUTE,
        {"name": "Renamed", "cron": "0 4 * * *", "command": "save-all", "alert_after_missed": "3"},
        ok=302,
        also=COMMAND,
    ),
    PanelRoute("post", S + "/schedules/{schedule}/toggle", Scope.SCHEDULES_EXECUTE, ok=302),
    PanelRoute("post", S + "/schedules/{schedule}/run", Scope.SCHEDULES_EXECUTE, ok=302),
    PanelRoute("post", S + "/schedules/{schedule}/delete", Scope.SCHEDULES_EXECUTE, ok=302),
    # The file manager; the world's server is on the simulated node, which serves no files.
    PanelRoute("get", S + "/files", Scope.FILES_READ),
    PanelRoute("get", S + "/files/edit", Scope.FILES_READ),
    PanelRoute(
        "post",
        S + "/files/edit",
        Scope.FILES_WRITE,
        {"path": "/a.txt", "content": "x"},
        ok=400,
        also=(Scope.FILES_READ.value,),
    ),
    PanelRoute("get", S + "/files/download", Scope.FILES_READ, ok=302),
    PanelRoute("post", S + "/files/upload-link", Scope.FILES_WRITE, {"path": "/"}, ok=400),
    PanelRoute(
        "post",
        S + "/files/change",
        Scope.FILES_WRITE,
        {"action": "directory", "folder": "/", "name": "mods"},
        ok=302,
    ),
    PanelRoute(
        "post", S + "/files/delete", Scope.FILES_DELETE, {"folder": "/", "paths": "/a.txt"}, ok=302
    ),
    PanelRoute("get", S + "/backups", Scope.BACKUPS_READ),
    PanelRoute("post", S + "/backups/new", Scope.BACKUPS_CREATE, {"name": "b"}, ok=302),
    PanelRoute("post", S + "/backups/{backup}/restore", Scope.BACKUPS_RESTORE, ok=302),
    PanelRoute("post", S + "/maintenance", Scope.MAINTENANCE_EXECUTE, {"action": "wipe"}, ok=302),
    PanelRoute("get", S + "/settings", Scope.SERVERS_READ),
    # Looking at settings and config events needs servers:read, changing them servers:power.
    PanelRoute(
        "post", S + "/settings", Scope.SERVERS_POWER, SETTINGS, ok=302, also=(Scope.SERVERS_READ,)
    ),
    PanelRoute("get", S + "/config-events", Scope.SERVERS_READ),
    PanelRoute(
        "post",
        S + "/config-events",
        Scope.SERVERS_POWER,
        {"name": "Later", "apply_at": "2099-01-01T10:00", "motd": "Later!"},
        ok=302,
        also=(Scope.SERVERS_READ,),
    ),
    PanelRoute("post", S + "/config-events/{event}/end", Scope.SERVERS_POWER, ok=302),
    PanelRoute("post", "/panel/switch-organization/", SIGNED_IN, ok=302, organization_wide=True),
    # The person's own account: their factors, password and sessions (a wrong or missing code
    # is refused by the page itself, after the person is let in).
    *(
        PanelRoute(method, "/accounts/" + path, SIGNED_IN, data, ok=ok, organization_wide=True)
        for method, path, data, ok in [
            ("get", "security/", {}, 200),
            ("get", "security/totp/", {}, 200),
            ("post", "security/totp/", {"code": "000000"}, 400),
            ("post", "security/totp/remove/", {"code": "000000"}, 302),
            ("get", "security/recovery-codes/", {}, 302),
            ("post", "security/recovery-codes/renew/", {"code": "000000"}, 302),
            ("post", "security/passkeys/options/", {}, 200),
            ("post", "security/passkeys/", {}, 400),
            ("post", "security/passkeys/1/remove/", {"code": "000000"}, 302),
            ("get", "security/password/", {}, 200),
            ("post", "security/password/", {}, 400),
            ("get", "sessions/", {}, 200),
            ("post", "sessions/1/end/", {}, 302),
            ("post", "sessions/end-others/", {}, 302),
            ("get", "ssh-keys/", {}, 200),
            ("post", "ssh-keys/", {"name": "k", "public_key": "not a key"}, 400),
            ("post", "ssh-keys/1/remove/", {}, 302),
        ]
    ),
    PanelRoute(
        "post",
        "/accounts/security/organization/",
        OWNER,
        {"require_second_factor": "on"},
        ok=302,
        organization_wide=True,
    ),
]
PEOPLE = ["anonymous", "owner", "with", "without", "other-owner"]


@dataclass
class World:
    ids: dict[str, str]
    acme: Organization


def _acme_rows(acme: Organization) -> list[QuerySet[Any]]:
    on_server: list[type[Model]] = [
        Backup,
        ConfigEvent,
        ConsoleCommand,
        Job,
        Schedule,
        SettingChange,
    ]
    return [
        ApiKey.objects.filter(organization=acme),
        Webhook.objects.filter(organization=acme),
        Delivery.objects.filter(organization_id=acme.id),
        Server.objects.filter(organization=acme),
        ScheduleRun.objects.filter(schedule__server__organization=acme),
        AuditRecord.objects.filter(organization_id=acme.id),
        *(model.objects.filter(server__organization=acme) for model in on_server),
    ]


def snapshot(acme: Organization) -> list[list[dict[str, Any]]]:
    """Every Acme row, every column: a refused request must leave all of them as they were."""
    return [list(rows.order_by("pk").values()) for rows in _acme_rows(acme)]


@pytest.fixture
def world(alice: Membership, acme: Organization, acme_server: Server) -> World:
    key = api_key_create(
        membership=alice,
        name="owners-key",
        scopes=KEY_SCOPES,
        actor=Actor.person(PanelContext(user_email=alice.user.email)),
    ).key
    webhook, _ = webhook_create(
        organization=acme,
        url="https://hooks.example.com/acme",
        events=["server.started"],
        actor=TEST_ACTOR,
    )
    delivery = make_delivery(webhook, status=DeliveryStatus.FAILED, server_id=acme_server.id)
    system = Actor.system("matrix")
    schedule = schedule_create(
        server=acme_server,
        data=ScheduleInput(name="Autosave", cron="*/10 * * * *", command="save-all"),
        created_by=alice.user,
        actor=system,
    )
    backup, _job = backup_create(server=acme_server, actor=system)
    Backup.objects.filter(pk=backup.pk).update(state="completed")
    Job.objects.filter(server=acme_server).update(state="succeeded")
    event = config_event_create(
        server=acme_server,
        name="Weekend",
        changes={"motd": "Weekend!"},
        apply_at=timezone.now() - timedelta(minutes=1),
        revert_at=None,
        created_by=alice.user,
        actor=system,
    )
    ConfigEvent.objects.filter(pk=event.pk).update(state="active")
    ids = {
        "key": key.key_id,
        "webhook": webhook.id,
        "delivery": delivery.id,
        "server": acme_server.id,
        "schedule": schedule.id,
        "backup": backup.id,
        "event": event.id,
    }
    return World(ids=ids, acme=acme)


def _member(acme: Organization, email: str, scopes: list[str]) -> Membership:
    return member_add(organization=acme, email=email, password=None, member_scopes=scopes)


def _person_client(
    person: str, route: PanelRoute, acme: Organization, charlie: Membership, alice: Membership
) -> Client:
    client = Client()
    needed = [*KEY_SCOPES, "keys:read"] if route.needs == KEY_RULE else [route.needs]
    held = {
        "owner": None,
        "with": [*needed, *route.also] if route.needs not in (SIGNED_IN, OWNER) else [],
        "without": sorted(CATALOGUE - set(needed)),
    }
    if person == "owner":
        client.force_login(alice.user)
    elif person in held:
        client.force_login(_member(acme, f"{person}@acme.test", held[person] or []).user)
    elif person == "other-owner":
        client.force_login(charlie.user)
    return client


def _call(client: Client, route: PanelRoute, world: World) -> Any:
    url = route.path.format(**world.ids)
    data = dict(route.data)
    if route.path == "/panel/switch-organization/":
        data = {"organization": world.acme.id}
    return getattr(client, route.method)(url, data)


Expect = Callable[[Any], None]


def _refused_status(route: PanelRoute, person: str) -> int | None:
    """The status a refused person gets, or None when the person is allowed."""
    if person == "anonymous":
        return 302
    if route.needs == OWNER and person in ("with", "without"):
        return 403
    if person in ("owner", "with"):
        return None
    if person == "without":
        if route.needs == SIGNED_IN:
            return None
        if route.needs == KEY_RULE:
            action = route.path.rsplit("/", 1)[-1]
            if action == "new":
                return 422 if route.method == "post" else None
            return {"rotate": 422, "delete": 403}.get(action)
        return 403
    # Another organization's owner: an Acme object is simply not found; organization-wide
    # pages show Globex's own data (and switching to Acme is refused: not a member).
    if route.path == "/panel/switch-organization/":
        return 403
    return None if route.organization_wide else 404


@pytest.mark.parametrize("person", PEOPLE)
@pytest.mark.parametrize("route", ROUTES, ids=str)
def test_the_panel_matrix(
    route: PanelRoute, person: str, world: World, alice: Membership, charlie: Membership
) -> None:
    client = _person_client(person, route, world.acme, charlie, alice)
    before = snapshot(world.acme)
    response = _call(client, route, world)
    refused = _refused_status(route, person)
    body = response.content.decode()
    if refused is None:
        assert response.status_code == route.ok, body[:800]
        if person in ("other-owner", "without"):
            assert "owners-key" not in body  # a key list without keys:read: own keys only
        if person == "other-owner":
            assert world.ids["server"] not in body
        return
    assert response.status_code == refused, body[:800]
    if person == "anonymous":
        assert response["Location"].startswith("/accounts/login/")
    if route.needs == KEY_RULE and refused == 422:
        assert "scope_exceeds_permissions" in body
    assert snapshot(world.acme) == before


# Not in the matrix: the sign-in pages (tests/accounts/test_second_factor.py), the owner's
# one-time links, which sign in by their token alone (tests/application/test_login_links.py),
# and /panel/ itself (a redirect to the key list).
OUTSIDE_THE_MATRIX = {
    "accounts/login/",
    "accounts/login/link/<str:token>/",
    "accounts/login/set-password/<str:token>/",
    "accounts/login/second-factor/",
    "accounts/login/passkey/options/",
    "accounts/login/passkey/",
    "accounts/logout/",
    "panel/",
}


def test_the_matrix_covers_every_panel_route(world: World) -> None:
    covered = {resolve(route.path.format(**world.ids)).func for route in ROUTES}
    missing = [
        p.route
        for p in panel_patterns()
        if p.callback not in covered and p.route not in OUTSIDE_THE_MATRIX
    ]
    assert missing == []
