"""A node's SFTP as its heartbeat reports it (port, host key fingerprint), and the SFTP box
on the server's panel page."""

import json

import pytest
from django.test import Client

from audit.actors import Actor
from servers.models import Node
from servers.services import server_create
from tests.servers.node_fixtures import beat, register

HEARTBEAT = "/internal/nodes/heartbeat"
FINGERPRINT = "SHA256:" + "A" * 42 + "0"


def heartbeat(token: str, **fields):
    body = {"agent_version": "1", "outbox_id": "b", "servers": {}, **fields}
    return Client().post(
        HEARTBEAT, json.dumps(body), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip


@pytest.fixture(name="node_and_token")
def node_and_token_fixture(db):
    return register("node-a")


def test_a_heartbeat_keeps_the_sftp_port_and_host_key(node_and_token):
    node, token = node_and_token
    answer = heartbeat(token, sftp={"port": 2022, "fingerprint": FINGERPRINT})
    assert answer.status_code == 200
    node.refresh_from_db()
    assert (node.sftp_port, node.sftp_host_key_fingerprint) == (2022, FINGERPRINT)
    heartbeat(token)  # an agent that does not say: what was said stays
    node.refresh_from_db()
    assert node.sftp_port == 2022
    heartbeat(token, sftp={"port": None, "fingerprint": None})  # SFTP turned off
    node.refresh_from_db()
    assert (node.sftp_port, node.sftp_host_key_fingerprint) == (None, "")


@pytest.mark.parametrize(
    "sftp",
    [
        {"port": 0, "fingerprint": FINGERPRINT},
        {"port": "2022", "fingerprint": FINGERPRINT},
        {"port": 2022, "fingerprint": "MD5:ab:cd"},
        [2022],
    ],
    ids=["port-0", "port-text", "not-sha256", "not-an-object"],
)
def test_a_malformed_sftp_report_is_400(node_and_token, sftp):
    assert heartbeat(node_and_token[1], sftp=sftp).status_code == 400


def test_the_servers_page_shows_how_to_connect(alice_client, alice, acme, node_and_token):
    node, token = node_and_token
    heartbeat(token, sftp={"port": 2022, "fingerprint": FINGERPRINT})
    beat(Node.objects.get(id=node.id))
    server = server_create(actor=Actor.system("t"), organization=acme, name="D", game="demo",
                           node=node)  # fmt: skip
    page = alice_client.get(f"/panel/servers/{server.id}/").content.decode()
    assert f"sftp -P 2022 alice@acme.test.{server.id}@198.51.100.7" in page
    assert FINGERPRINT in page


def test_the_page_says_when_the_person_lacks_files_sftp(client, bob, acme, node_and_token):
    node, token = node_and_token
    heartbeat(token, sftp={"port": 2022, "fingerprint": FINGERPRINT})
    server = server_create(actor=Actor.system("t"), organization=acme, name="D", game="demo",
                           node=node)  # fmt: skip
    client.force_login(bob.user)
    page = client.get(f"/panel/servers/{server.id}/").content.decode()
    assert "SFTP needs the scope" in page and "sftp -P" not in page
