"""`demo`: demo organizations, logins and servers, printed on the console.

Safe to run again and again (`make run` does): everything is looked up by slug, email or
name before it is created, and the demo logins get the demo password back. No API key is
made: a key is shown only once, so a person creates it in the panel.

With `DEMO_NODE_URL`, `DEMO_NODE_CA_FILE` and `DEMO_NODE_TOKEN_FILE` set (`make run` sets them
for its local agent), the node `local` is registered (or brought up to date) with that URL and
CA, its token is written to the token file when that file does not hold a working one, and the
demo organization's servers are `demo` games on it: real processes once the agent runs.

With `DEMO_WEBHOOK_URL` set (`make run` sets it to its local receiver), the demo organization
also gets a webhook to that URL for every event. A signing secret is shown only once, so
each run replaces the webhook of that URL (and its history) with a new one and writes its
secret to `DEMO_WEBHOOK_SECRET_FILE`, where the receiver reads it to verify signatures.
"""

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from django.core.management.base import BaseCommand
from django.db import transaction

from accounts.models import Organization, User
from accounts.scopes import Scope
from accounts.selectors import organization_get_by_slug
from accounts.services import member_add, organization_create
from audit.actors import Actor
from servers.demo import LocalNodeSetup, ensure_demo_extras, ensure_local_node
from servers.models import Node, Server
from servers.runtime import host_traits
from servers.selectors import server_list_for_organization
from servers.services import server_create
from webhooks.events import Event
from webhooks.selectors import webhook_list_for_org
from webhooks.services import webhook_create, webhook_delete

DEMO_PASSWORD = "demo-password"
DEFAULT_SFTP_PORT = 2022  # the local agent's (AGENT_SFTP_PORT's default)
ADMIN_EMAIL = "admin@demo.gshost.test"
DEFAULT_PANEL_URL = "http://127.0.0.1:8000/panel/keys/"


@dataclass(frozen=True)
class DemoOrganization:
    slug: str
    name: str
    owner: str
    servers: tuple[tuple[str, str], ...]
    members: tuple[tuple[str, tuple[Scope, ...]], ...] = field(default=())
    node: Node | None = None  # None: where server_create puts them (the simulated node)


DEMO = DemoOrganization(
    slug="demo",
    name="Demo Gaming",
    owner="owner@demo.gshost.test",
    members=(
        (
            "member@demo.gshost.test",
            (Scope.SERVERS_READ, Scope.KEYS_READ, Scope.AUDIT_READ),
        ),
    ),
    servers=(
        ("Survival", "minecraft"),
        ("Creative", "minecraft"),
        ("Racing league", "custom"),
    ),
)
RIVAL = DemoOrganization(
    slug="rival",
    name="Rival Hosting",
    owner="owner@rival.gshost.test",
    servers=(("Rival world", "minecraft"),),
)


class Command(BaseCommand):
    help = "Create (or restore) the demo organizations, logins and servers, and print them."

    def handle(self, *args: Any, **options: Any) -> None:
        setup = LocalNodeSetup.from_environment()
        with transaction.atomic():
            node = ensure_local_node(setup) if setup is not None else None
            made = [(DEMO, *_ensure(_on_node(DEMO, node))), (RIVAL, *_ensure(RIVAL))]
            _ensure_admin()
            _demo, demo_organization, demo_servers = made[0]
            webhook = _replace_demo_webhook(demo_organization)
        # After commit: a backup asks its node, and no call to a node runs in a transaction.
        ensure_demo_extras(demo_servers, User.objects.get(email__iexact=DEMO.owner))
        panel_url = os.environ.get("PANEL_URL") or DEFAULT_PANEL_URL
        self.stdout.write(self.style.SUCCESS("Demo data is ready."))
        self.stdout.write(f"Panel:        {panel_url}")
        self.stdout.write(f"Sign in at:   {urljoin(panel_url, '/accounts/login/')}")
        self.stdout.write(f"Django admin: {urljoin(panel_url, '/admin/')}")
        for demo, organization, servers in made:
            self.stdout.write("")
            self.stdout.write(_describe(demo, organization, servers))
        self.stdout.write("")
        self.stdout.write(f"Django admin login (staff): {ADMIN_EMAIL} / {DEMO_PASSWORD}")
        self.stdout.write("")
        self.stdout.write(_how_to_make_a_key(panel_url))
        if webhook is not None:
            self.stdout.write("")
            self.stdout.write(_how_to_see_a_delivery(panel_url, webhook))


def _on_node(demo: DemoOrganization, node: Node | None) -> DemoOrganization:
    """The organization's servers as `demo` games on `node`, or as they are without one."""
    if node is None:
        return demo
    servers = tuple((name, "demo") for name, _game in demo.servers)
    return replace(demo, servers=servers, node=node)


def _ensure(demo: DemoOrganization) -> tuple[Organization, list[Server]]:
    organization = organization_get_by_slug(demo.slug)
    if organization is None:
        organization = organization_create(slug=demo.slug, name=demo.name)
    member_add(organization=organization, email=demo.owner, password=DEMO_PASSWORD, owner=True)
    for email, scopes in demo.members:
        member_add(
            organization=organization, email=email, password=DEMO_PASSWORD, member_scopes=scopes
        )
    servers = [_ensure_server(organization, name, game, demo.node) for name, game in demo.servers]
    return organization, servers


def _ensure_server(organization: Organization, name: str, game: str, node: Node | None) -> Server:
    existing = server_list_for_organization(organization.id).filter(name=name)
    if node is not None:
        existing = existing.filter(node=node)
    return existing.first() or server_create(
        organization=organization, name=name, game=game, node=node, actor=DEMO_ACTOR
    )


def _ensure_admin() -> None:
    if not User.objects.filter(email__iexact=ADMIN_EMAIL).exists():
        User.objects.create_superuser(email=ADMIN_EMAIL, password=DEMO_PASSWORD)


DEMO_ACTOR = Actor.system("demo command")


def _replace_demo_webhook(organization: Organization) -> tuple[str, str] | None:
    """The (id, url) of the demo's new webhook, or None without a receiver to send to."""
    url = os.environ.get("DEMO_WEBHOOK_URL", "")
    if not url:
        return None
    for old in webhook_list_for_org(organization.id).filter(url=url):
        webhook_delete(webhook=old, actor=DEMO_ACTOR)
    webhook, secret = webhook_create(
        organization=organization,
        url=url,
        events=[event.value for event in Event],
        description="The demo's local receiver (make run)",
        actor=DEMO_ACTOR,
    )
    secret_file = os.environ.get("DEMO_WEBHOOK_SECRET_FILE", "")
    if secret_file:
        path = Path(secret_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secret + "\n")
    return webhook.id, webhook.url


def _describe(demo: DemoOrganization, organization: Organization, servers: list[Server]) -> str:
    lines = [f"{organization.name} (slug {organization.slug}, {organization.id})"]
    lines.append(f"  owner   {demo.owner} / {DEMO_PASSWORD}")
    for email, scopes in demo.members:
        lines.append(f"  member  {email} / {DEMO_PASSWORD}  ({', '.join(scopes)})")
    lines.append("  servers:")
    width = max(len(server.name) for server in servers)
    lines += [
        f"    {server.id}  {server.name:<{width}}  {server.game:<9}  node {server.node.name:<9}  "
        f"{server.address}"
        for server in servers
    ]
    playable = next((s for s in servers if not host_traits(s.node).invents_readings), None)
    if playable is not None:
        host, port = playable.address.rsplit(":", 1)
        lines.append(
            f"  play: .venv/bin/python -m gshost_agent.play {host} {port}, "
            "then type JOIN <your name> (once it runs)"
        )
        lines.append(
            f"  files: sftp -P {os.environ.get('AGENT_SFTP_PORT') or DEFAULT_SFTP_PORT} "
            f"{demo.owner}.{playable.id}@{host}  "
            f"(password {DEMO_PASSWORD})"
        )
    return "\n".join(lines)


def _how_to_make_a_key(panel_url: str) -> str:
    login_url = urljoin(panel_url, "/accounts/login/")
    new_key_url = urljoin(panel_url, "/panel/keys/new")
    servers_url = urljoin(panel_url, "/api/public/v1/servers")
    return "\n".join(
        [
            "No API key is created (a key is shown only once). To make one:",
            f"  1. sign in at {login_url} as {DEMO.owner} / {DEMO_PASSWORD}",
            f"  2. open {new_key_url}, pick scopes (e.g. servers:read), copy the key",
            f'  3. curl -H "Authorization: Bearer gsk_..." {servers_url}',
        ]
    )


def _how_to_see_a_delivery(panel_url: str, webhook: tuple[str, str]) -> str:
    webhook_id, url = webhook
    deliveries_url = urljoin(panel_url, f"/panel/webhooks/{webhook_id}/deliveries")
    return "\n".join(
        [
            f"Webhook {webhook_id} sends every event to {url}",
            "(the local receiver, which prints each delivery and whether its signature verified).",
            "  1. the demo's servers are being started now on the local agent: each start is",
            "     delivered as server.started (stop or start one at "
            f"{urljoin(panel_url, '/panel/servers/')} for more)",
            f"  2. watch the deliveries at {deliveries_url}",
        ]
    )
