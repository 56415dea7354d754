"""The live console's control-plane side: session tokens (the API route and the panel's),
the keys and origins the heartbeat answer carries, a command typed into a socket (the node
route), and withdrawals pushed to the agents. The agent's side is
tests/agent/test_console_socket.py."""

import json
import time

import jwt
import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import Membership
from accounts.services import api_key_revoke, api_key_rotate, member_add, member_remove
from audit.actors import Actor
from audit.models import AuditRecord
from audit.services import PanelContext
from servers.agents.console_tokens import published_keys
from servers.models import ConsoleCommand, PendingWithdrawal, Server
from servers.services import server_delete_request
from tests.agent.lines import wait_until
from tests.conftest import API, client_for, error_of

HEARTBEAT = "/internal/nodes/heartbeat"
COMMANDS = "/internal/nodes/console-commands"


def open_session(key, server):
    return client_for(key).post(f"{API}/servers/{server.id}/console/sessions")


def claims_of(token, node):
    (jwk,) = published_keys()
    assert jwt.get_unverified_header(token)["kid"] == jwk["kid"]
    return jwt.decode(token, jwt.PyJWK(jwk).key, algorithms=["EdDSA"], audience=node.name)


def node_post(path, body, token):
    return Client().post(
        path,
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def heartbeat(token, **fields):
    body = {"agent_version": "test", "servers": {}, **fields}
    return node_post(HEARTBEAT, body, token)


# Sessions


def test_a_session_names_the_node_socket_the_server_the_key_and_five_minutes(
    make_key, demo_server, agent_node
):
    key = make_key(["servers:read"])
    response = open_session(key, demo_server)
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"url", "token", "expires_at", "scopes"}
    port = agent_node.url.rsplit(":", 1)[1]
    assert body["url"] == f"wss://198.51.100.7:{port}/api/v1/servers/{demo_server.id}/console"
    assert body["scopes"] == ["servers:read"]
    claims = claims_of(body["token"], agent_node)
    assert claims["sub"] == f"key:{key.key_id}"
    assert claims["server"] == demo_server.id
    assert claims["scopes"] == ["servers:read"]
    assert claims["exp"] - claims["iat"] == pytest.approx(300, abs=1)
    assert len(claims["jti"]) >= 16


def test_a_key_with_console_write_gets_it_in_its_session(make_key, demo_server):
    response = open_session(make_key(["servers:read", "console:write"]), demo_server)
    assert response.json()["scopes"] == ["servers:read", "console:write"]


def test_each_session_has_its_own_token_id(make_key, demo_server, agent_node):
    key = make_key(["servers:read"])
    first, second = (open_session(key, demo_server).json()["token"] for _ in range(2))
    assert claims_of(first, agent_node)["jti"] != claims_of(second, agent_node)["jti"]


def test_a_session_needs_servers_read(make_key, demo_server):
    response = open_session(make_key(["console:write"]), demo_server)
    assert response.status_code == 403
    assert error_of(response)["required_scope"] == "servers:read"


def test_a_key_restricted_to_other_servers_gets_server_not_found(
    make_key, demo_server, acme_server
):
    key = make_key(["servers:read"], server_ids=[acme_server.id])
    response = open_session(key, demo_server)
    assert response.status_code == 404
    assert error_of(response)["code"] == "server_not_found"


def test_a_suspended_server_has_no_session(make_key, demo_server):
    Server.objects.filter(id=demo_server.id).update(suspended_at=timezone.now())
    response = open_session(make_key(["servers:read"]), demo_server)
    assert response.status_code == 409
    assert error_of(response)["code"] == "server_suspended"


def test_a_server_of_the_simulated_node_has_no_live_console(make_key, acme_server):
    response = open_session(make_key(["servers:read"]), acme_server)
    assert response.status_code == 501
    assert error_of(response)["code"] == "not_supported"


def test_issuing_a_session_never_calls_the_node(make_key, demo_server, stand_in_agent):
    open_session(make_key(["servers:read"]), demo_server)
    assert stand_in_agent.requests == []


def test_the_panel_gives_the_signed_in_person_a_session_with_their_scopes(
    alice_client, alice, demo_server, agent_node
):
    response = alice_client.post(f"/panel/servers/{demo_server.id}/console/session")
    assert response.status_code == 201
    body = response.json()
    assert body["scopes"] == ["servers:read", "console:write"]
    assert claims_of(body["token"], agent_node)["sub"] == f"person:{alice.user_id}"


def test_the_server_page_lets_the_browser_reach_the_node_socket(alice_client, demo_server):
    response = alice_client.get(f"/panel/servers/{demo_server.id}/")
    port = demo_server.node.url.rsplit(":", 1)[1]
    assert f"wss://198.51.100.7:{port}" in response["Content-Security-Policy"]
    assert b"console-socket.js" in response.content


# What agents are told


def test_the_heartbeat_answer_carries_the_signing_keys_and_the_panel_origins(
    settings, agent_node, node_token
):
    settings.PANEL_URL = "https://panel.example.test/panel/keys/"
    settings.PANEL_ORIGINS = ["https://admin.example.test"]
    console = heartbeat(node_token).json()["console"]
    assert console["keys"] == published_keys()
    assert console["origins"] == ["https://panel.example.test", "https://admin.example.test"]


def test_a_rotation_publishes_both_keys_and_signs_with_the_new_one(
    settings, make_key, demo_server, agent_node, node_token
):
    settings.CONSOLE_TOKEN_SECRETS = ["new-secret", "old-secret"]
    new, old = heartbeat(node_token).json()["console"]["keys"]
    token = open_session(make_key(["servers:read"]), demo_server).json()["token"]
    assert jwt.get_unverified_header(token)["kid"] == new["kid"] != old["kid"]


# A command typed into a socket


def socket_token(make_key, server, scopes=("servers:read", "console:write"), **options):
    key = make_key(list(scopes), **options)
    return key, open_session(key, server).json()["token"]


def test_a_socket_command_is_sent_audited_and_published_with_source_websocket(
    make_key, demo_server, node_token, stand_in_agent, put_in_state, published
):
    put_in_state(demo_server, "running")
    key, token = socket_token(make_key, demo_server)
    body = {"token": token, "command": "say hi", "ip": "203.0.113.9"}
    response = node_post(COMMANDS, body, node_token)
    assert response.status_code == 202
    assert stand_in_agent.calls("POST")[-1].body == {"command": "say hi"}
    sent = ConsoleCommand.objects.get(server=demo_server)
    assert (sent.source, sent.key_id, sent.command) == ("websocket", key.key_id, "say hi")
    (event,) = [p for p in published if p.event == "console.command_sent"]
    assert event.data["source"] == "websocket"
    assert event.data["key_id"] == key.key_id
    row = AuditRecord.objects.get(action="server.console", actor_key_id=key.key_id)
    assert (row.method, row.ip, row.server_id) == ("WS", "203.0.113.9", demo_server.id)


def test_a_socket_command_is_validated_as_the_api_does(
    make_key, demo_server, node_token, put_in_state
):
    put_in_state(demo_server, "running")
    _, token = socket_token(make_key, demo_server)
    response = node_post(COMMANDS, {"token": token, "command": "a\x07b"}, node_token)
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"


def test_a_socket_command_of_a_revoked_key_is_refused_and_reaches_nothing(
    make_key, demo_server, node_token, stand_in_agent, put_in_state
):
    put_in_state(demo_server, "running")
    key, token = socket_token(make_key, demo_server)
    api_key_revoke(key=key_row(key), actor=Actor.system("test"))
    response = node_post(COMMANDS, {"token": token, "command": "say hi"}, node_token)
    assert response.status_code == 403
    assert error_of(response)["code"] == "token_refused"
    assert not [c for c in stand_in_agent.calls("POST") if c.path.endswith("/console")]


def test_a_socket_command_without_console_write_in_the_token_is_refused(
    make_key, demo_server, node_token, put_in_state
):
    put_in_state(demo_server, "running")
    _, token = socket_token(make_key, demo_server, scopes=("servers:read",))
    response = node_post(COMMANDS, {"token": token, "command": "say hi"}, node_token)
    assert error_of(response)["code"] == "token_refused"


def test_a_token_passed_on_by_another_node_is_refused(
    make_key, demo_server, node_token, put_in_state
):
    from tests.servers.node_fixtures import register

    put_in_state(demo_server, "running")
    _, token = socket_token(make_key, demo_server)
    _, other_token = register("node-2", url="https://127.0.0.1:9444")
    response = node_post(COMMANDS, {"token": token, "command": "say hi"}, other_token)
    assert error_of(response)["code"] == "token_refused"


def test_a_person_command_over_a_socket_is_audited_as_theirs(
    alice_client, alice, demo_server, node_token, put_in_state
):
    put_in_state(demo_server, "running")
    token = alice_client.post(f"/panel/servers/{demo_server.id}/console/session").json()["token"]
    assert node_post(COMMANDS, {"token": token, "command": "list"}, node_token).status_code == 202
    sent = ConsoleCommand.objects.get(server=demo_server)
    assert (sent.source, sent.user_email) == ("websocket", alice.user.email)
    assert AuditRecord.objects.filter(actor_email=alice.user.email, method="WS").exists()


# Withdrawals pushed to the agents


def key_row(key):
    from accounts.models import ApiKey

    return ApiKey.objects.get(key_id=key.key_id)


def pushed(stand_in_agent):
    return [c.body for c in stand_in_agent.calls("POST") if c.path == "/v1/withdrawals"]


@pytest.mark.django_db(transaction=True)
def test_a_revoked_key_is_pushed_to_the_agent_at_once(make_key, demo_server, stand_in_agent):
    key = make_key(["servers:read"])
    api_key_revoke(key=key_row(key), actor=Actor.system("test"))
    (message,) = wait_until(lambda: pushed(stand_in_agent), 5.0)
    assert message["key_ids"] == [key.key_id]
    assert message["at"] == pytest.approx(time.time(), abs=5)


@pytest.mark.django_db(transaction=True)
def test_a_rotation_with_grace_zero_withdraws_the_old_key(
    make_key, alice, demo_server, stand_in_agent
):
    key = make_key(["servers:read"])
    context = PanelContext(user_email=alice.user.email)
    api_key_rotate(key=key_row(key), membership=alice, grace_hours=0, actor=Actor.person(context))
    (message,) = wait_until(lambda: pushed(stand_in_agent), 5.0)
    assert message["key_ids"] == [key.key_id]


@pytest.mark.django_db(transaction=True)
def test_a_removed_member_is_withdrawn_from_the_organization_servers(
    bob, demo_server, stand_in_agent
):
    member_remove(membership=bob)
    (message,) = wait_until(lambda: pushed(stand_in_agent), 5.0)
    assert message["person_ids"] == [str(bob.user_id)]
    assert message["server_ids"] == [demo_server.id]
    assert not Membership.objects.filter(id=bob.id).exists()


@pytest.mark.django_db(transaction=True)
def test_a_member_whose_scopes_are_narrowed_is_withdrawn(bob, acme, demo_server, stand_in_agent):
    member_add(organization=acme, email=bob.user.email, password=None, member_scopes=[])
    (message,) = wait_until(lambda: pushed(stand_in_agent), 5.0)
    assert (message["person_ids"], message["server_ids"]) == ([str(bob.user_id)], [demo_server.id])


@pytest.mark.django_db(transaction=True)
def test_a_deleted_server_is_withdrawn(demo_server, stand_in_agent):
    server_delete_request(server=demo_server, actor=Actor.system("test"))
    (message,) = wait_until(lambda: pushed(stand_in_agent), 5.0)
    assert message["server_ids"] == [demo_server.id]


def test_a_withdrawal_the_push_missed_rides_the_heartbeat_until_the_agent_took_it(
    make_key, demo_server, node_token, stand_in_agent, django_capture_on_commit_callbacks
):
    stand_in_agent.answer("POST", "/v1/withdrawals", 503, {"error": {}})
    key = make_key(["servers:read"])
    with django_capture_on_commit_callbacks(execute=True):
        api_key_revoke(key=key_row(key), actor=Actor.system("test"))
    (row,) = PendingWithdrawal.objects.all()
    carried = heartbeat(node_token).json()["withdrawals"]
    assert [(m["id"], m["key_ids"]) for m in carried] == [(row.id, [key.key_id])]
    assert heartbeat(node_token, withdrawals_taken=[row.id]).json()["withdrawals"] == []
    assert not PendingWithdrawal.objects.exists()
