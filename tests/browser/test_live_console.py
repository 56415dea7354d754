"""The server page's live console in Chromium: straight from a real agent's websocket (its
certificate, issued by the test CA, trusted by Chromium), a typed command sent over the
socket without a reload, and the mirror when the node cannot be reached."""

import base64
import hashlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from accounts.models import Membership, Organization
from audit.actors import Actor
from gshost.encryption import encrypt_secret
from servers.fleet.nodes import NodeInput, node_create, token_hash
from servers.models import Node, Server
from servers.services import PowerAction, server_create, server_power
from tests.agent.conftest import AgentFactory, certificates, games_dir
from tests.agent.lines import wait_until
from tests.browser.conftest import (
    CHROMIUM_FLAGS,
    OPEN_PAGES,
    TIMEOUT_MS,
    PageLog,
    chromium_launched,
    sign_in,
)
from tests.browser.quiet_network import QuietNetwork
from tests.ports import free_port_range

__all__ = ["certificates", "games_dir"]  # the agent tests' fixtures, used here too

pytestmark = [
    pytest.mark.django_db(transaction=True),
]


def spki_hash(pem: Path) -> str:
    """What `--ignore-certificate-errors-spki-list` takes: a certificate's public key, hashed.
    Chromium compares it with the chain the server presents: the agent presents its own
    certificate (issued by the test CA), not the CA's."""
    certificate = x509.load_pem_x509_certificate(pem.read_bytes())
    spki = certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


@pytest.fixture(name="trusting_browser")
def trusting_browser_fixture(
    certificates: dict[str, Path], quiet_network: QuietNetwork
) -> Iterator[Browser]:
    trusted = spki_hash(certificates["cert"])
    flags = [*CHROMIUM_FLAGS, f"--ignore-certificate-errors-spki-list={trusted}"]
    with chromium_launched(quiet_network, flags) as browser:
        yield browser


@pytest.fixture(name="live_page")
def live_page_fixture(trusting_browser: Browser, live_server: Any) -> Iterator[Page]:
    context = trusting_browser.new_context(base_url=live_server.url)
    context.set_default_timeout(TIMEOUT_MS)
    log = PageLog(context.new_page())
    OPEN_PAGES.add(log)
    yield log.page
    OPEN_PAGES.discard(log)
    context.close()


@pytest.fixture(name="agent_server")
def agent_server_fixture(
    settings: Any, live_server: Any, certificates, games_dir, acme: Organization
) -> Iterator[Server]:
    """A demo server running on a real agent that reports to the live test server."""
    settings.PANEL_URL = live_server.url  # the page's origin: the agent lets it in
    control = SimpleNamespace(url=live_server.url.replace("localhost", "127.0.0.1"))
    factory = AgentFactory(certificates, games_dir, control)  # type: ignore[arg-type]
    agent = factory.make()
    created = node_create(
        data=NodeInput(
            name="node-live",
            url=agent.url,
            address="127.0.0.1",
            ports=free_port_range(2),
            ca_pem=certificates["ca"].read_text(),
        )
    )
    token = agent.env["AGENT_TOKEN"]
    Node.objects.filter(id=created.node.id).update(
        encrypted_token=encrypt_secret(token), token_hash=token_hash(token)
    )
    agent.start()
    wait_until(lambda: Node.objects.get(id=created.node.id).last_heartbeat_at, 20)
    node = Node.objects.get(id=created.node.id)
    server = server_create(
        actor=Actor.system("test"), organization=acme, name="Live", game="demo", node=node
    )
    server_power(server=server, action=PowerAction.START, actor=Actor.system("test"))
    wait_until(lambda: Server.objects.get(id=server.id).state == "running", 30)
    yield server
    factory.clean_up()


def test_the_console_streams_from_the_node_and_sends_a_typed_command_over_the_socket(
    live_page: Page, alice: Membership, agent_server: Server
):
    sign_in(live_page, "alice@acme.test", "alice-pw-123")
    live_page.goto(f"/panel/servers/{agent_server.id}/")
    output = live_page.locator("[data-console-lines]")
    expect(output).to_have_attribute("data-console-live", "socket")
    expect(output).to_contain_text("ready on port")
    live_page.evaluate("window.notReloaded = true")
    live_page.fill("input[name=command]", "say hello over the socket")
    live_page.press("input[name=command]", "Enter")
    expect(output).to_contain_text("[say] hello over the socket")
    assert live_page.evaluate("window.notReloaded") is True
    assert live_page.input_value("input[name=command]") == ""
    (sent,) = wait_until(lambda: list(agent_server.console_commands.all()), 10)
    assert (sent.source, sent.user_email) == ("websocket", "alice@acme.test")


def test_the_console_falls_back_to_the_mirror_when_the_node_cannot_be_reached(
    live_page: Page, alice: Membership, acme: Organization, settings: Any, live_server: Any
):
    settings.PANEL_URL = live_server.url
    created = node_create(
        data=NodeInput(name="node-gone", url="https://127.0.0.1:9", address="127.0.0.1")
    )
    Node.objects.filter(id=created.node.id).update(last_heartbeat_at=timezone.now())
    server = server_create(
        actor=Actor.system("test"), organization=acme, name="Gone", game="demo", node=created.node
    )
    sign_in(live_page, "alice@acme.test", "alice-pw-123")
    live_page.goto(f"/panel/servers/{server.id}/")
    expect(live_page.locator("[data-console-status]")).to_contain_text("last known output")
    expect(live_page.locator("[data-console-lines]")).not_to_have_attribute(
        "data-console-live", "socket"
    )
