"""`POST /api/node/v1/sftp-auth`: the control plane's answer to an agent asking about an SFTP
login. Alice owns Acme; bob is a member with `servers:read` only; the server is on node-a."""

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.test import Client
from django.utils import timezone

from accounts.models import Membership, SshKey
from accounts.services import member_add
from accounts.ssh_keys import ssh_key_add
from audit.actors import Actor
from audit.models import AuditRecord, Source
from audit.services import PanelContext
from servers.models import Server
from servers.services import server_create
from tests.servers.node_fixtures import register

ROUTE = "/api/node/v1/sftp-auth"
ADDRESS = "203.0.113.5"


@pytest.fixture(name="nodes")
def nodes_fixture(db: None) -> dict[str, Any]:
    node_a, token_a = register("node-a")
    node_b, token_b = register("node-b", url="https://127.0.0.1:8445", address="198.51.100.8")
    return {"a": (node_a, token_a), "b": (node_b, token_b)}


@pytest.fixture(name="server")
def server_fixture(acme, nodes) -> Server:
    return server_create(
        actor=Actor.system("test"), organization=acme, name="Demo", game="demo", node=nodes["a"][0]
    )


def ask(token: str, **body: Any) -> Any:
    body.setdefault("client_address", ADDRESS)
    return Client().post(
        ROUTE, body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def login_of(person: Membership, server: Server) -> str:
    return f"{person.user.email}.{server.id}"


def test_it_accepts_the_persons_password_and_answers_what_the_agent_needs(alice, server, nodes):
    answer = ask(nodes["a"][1], username=login_of(alice, server), password="alice-pw-123")
    assert answer.status_code == 200, answer.content
    assert answer.json() == {
        "person_id": str(alice.user.pk),
        "email": "alice@acme.test",
        "server_id": server.id,
        "scopes": ["files:read", "files:write", "files:delete"],
        "ssh_key_id": None,
        "server": {"game": "demo", "disk_mb": server.disk_mb},
    }


def test_an_accepted_login_is_audited_with_source_sftp(alice, server, nodes):
    ask(nodes["a"][1], username=login_of(alice, server), password="alice-pw-123")
    row = AuditRecord.objects.get(action="files.sftp_login")
    assert (row.source, row.actor_email, row.server_id, row.ip) == (
        Source.SFTP,
        "alice@acme.test",
        server.id,
        ADDRESS,
    )
    assert json.loads(row.details) == {"path": "/", "with": "password"}


def test_it_accepts_an_ssh_key_the_person_added(alice, server, nodes):
    public = ed25519.Ed25519PrivateKey.generate().public_key()
    line = public.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()
    key = ssh_key_add(
        user=alice.user, name="laptop", public_key=line, context=PanelContext("alice@acme.test")
    )
    answer = ask(nodes["a"][1], username=login_of(alice, server), public_key=line)
    assert answer.status_code == 200
    assert answer.json()["ssh_key_id"] == key.id


def test_a_key_login_is_audited_only_once_its_signature_proved_the_key(alice, server, nodes):
    public = ed25519.Ed25519PrivateKey.generate().public_key()
    line = public.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()
    ssh_key_add(user=alice.user, name="k", public_key=line, context=PanelContext("alice@acme.test"))
    ask(nodes["a"][1], username=login_of(alice, server), public_key=line)
    assert not AuditRecord.objects.filter(action="files.sftp_login").exists()
    ask(nodes["a"][1], username=login_of(alice, server), public_key=line, signed=True)
    assert AuditRecord.objects.filter(action="files.sftp_login").count() == 1
    assert SshKey.objects.get(user=alice.user).last_used_at is not None


def test_it_refuses_a_key_the_person_did_not_add(alice, server, nodes):
    public = ed25519.Ed25519PrivateKey.generate().public_key()
    line = public.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()
    answer = ask(nodes["a"][1], username=login_of(alice, server), public_key=line)
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "sftp_login_refused"


def test_it_refuses_a_wrong_password(alice, server, nodes):
    answer = ask(nodes["a"][1], username=login_of(alice, server), password="wrong")
    assert answer.status_code == 403
    assert not AuditRecord.objects.filter(action="files.sftp_login").exists()


def test_it_refuses_a_server_on_another_node(alice, server, nodes):
    answer = ask(nodes["b"][1], username=login_of(alice, server), password="alice-pw-123")
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "sftp_login_refused"


def test_it_refuses_a_person_without_files_sftp(bob, server, nodes):
    answer = ask(nodes["a"][1], username=login_of(bob, server), password="bob-pw-123")
    assert answer.status_code == 403


def test_a_member_gets_only_the_file_scopes_held(bob, server, nodes):
    Membership.objects.filter(id=bob.id).update(scopes=["files:sftp", "files:read"])
    answer = ask(nodes["a"][1], username=login_of(bob, server), password="bob-pw-123")
    assert answer.json()["scopes"] == ["files:read"]


def test_it_refuses_a_server_of_another_organization(charlie, server, nodes):
    answer = ask(nodes["a"][1], username=login_of(charlie, server), password="charlie-pw-123")
    assert answer.status_code == 403


def test_it_refuses_a_suspended_server(alice, server, nodes):
    Server.objects.filter(id=server.id).update(suspended_at=timezone.now())
    answer = ask(nodes["a"][1], username=login_of(alice, server), password="alice-pw-123")
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "server_suspended"


def test_the_username_is_split_at_the_last_dot(acme, server, nodes):

    dotted = member_add(organization=acme, email="a.b@c.d.test", password="dots-pw-123", owner=True)
    answer = ask(nodes["a"][1], username=login_of(dotted, server), password="dots-pw-123")
    assert answer.status_code == 200


@pytest.mark.usefixtures("one_rate_window")
def test_failures_are_throttled_per_client_address_and_username(alice, server, nodes):
    username = login_of(alice, server)
    for _ in range(6):
        assert ask(nodes["a"][1], username=username, password="wrong").status_code == 403
    refused = ask(nodes["a"][1], username=username, password="alice-pw-123")
    assert refused.status_code == 429
    assert "Retry-After" in refused.headers
    other_address = ask(
        nodes["a"][1], username=username, password="alice-pw-123", client_address="203.0.113.6"
    )
    assert other_address.status_code == 200


@pytest.mark.usefixtures("one_rate_window")
def test_keys_merely_offered_are_no_failures(alice, server, nodes):
    username = login_of(alice, server)
    for _ in range(10):  # an ssh-agent holding many keys offers each in turn
        public = ed25519.Ed25519PrivateKey.generate().public_key()
        line = public.public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        ).decode()
        assert ask(nodes["a"][1], username=username, public_key=line).status_code == 403
    assert ask(nodes["a"][1], username=username, password="alice-pw-123").status_code == 200


@pytest.mark.usefixtures("one_rate_window")
def test_another_username_from_a_throttled_address_still_logs_in(alice, bob, server, nodes):
    for _ in range(6):
        ask(nodes["a"][1], username=login_of(bob, server), password="wrong")
    answer = ask(nodes["a"][1], username=login_of(alice, server), password="alice-pw-123")
    assert answer.status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"username": "x"},
        {"username": "a@b.srv_1", "password": "p", "public_key": "k"},
        {"username": "a@b.srv_1", "password": 3},
        {"username": "a@b.srv_1", "password": "p", "client_address": "not-an-address"},
    ],
    ids=["no-secret", "both", "not-a-string", "bad-address"],
)
def test_a_malformed_body_is_400(nodes, body):
    assert ask(nodes["a"][1], **body).status_code == 400


def test_it_needs_the_node_token(alice, server):
    answer = ask("gsn_" + "x" * 43, username=login_of(alice, server), password="alice-pw-123")
    assert answer.status_code == 401


@pytest.mark.usefixtures("one_rate_window")
def test_one_address_trying_many_usernames_is_throttled_too(alice, server, nodes, monkeypatch):
    monkeypatch.setattr("servers.agents.sftp_logins.FAILURES_PER_ADDRESS_PER_MINUTE", 3)
    for number in range(3):
        ask(nodes["a"][1], username=f"nobody{number}@acme.test.{server.id}", password="x")
    answer = ask(nodes["a"][1], username=login_of(alice, server), password="alice-pw-123")
    assert answer.status_code == 429
