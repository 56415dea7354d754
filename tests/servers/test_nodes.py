"""Registering nodes (`createnode`), their token (shown once, encrypted at rest, rotated from
the admin), their state from heartbeats, and the nodes admin."""

import logging
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone
from freezegun import freeze_time

from gshost.encryption import decrypt_secret
from servers.fleet.nodes import node_by_token, simulated_node, token_hash
from servers.models import Node, NodeState
from tests.servers.node_fixtures import beat, register

TOKEN = re.compile(r"gsn_[0-9A-Za-z]{43}")


def createnode(*args):
    out = StringIO()
    call_command("createnode", *args, stdout=out)
    return out.getvalue().strip()


def test_it_prints_a_token_once(db):
    token = createnode("node-a", "--url", "https://10.0.0.5:8444", "--address", "203.0.113.5")
    assert TOKEN.fullmatch(token)
    node = Node.objects.get(name="node-a")
    assert (node.kind, node.url, node.address) == ("agent", "https://10.0.0.5:8444", "203.0.113.5")
    assert (node.first_port, node.last_port) == (27000, 27099)


def test_it_keeps_the_token_encrypted_and_hashed_never_in_clear(db):
    token = createnode("node-a", "--url", "https://10.0.0.5:8444", "--address", "203.0.113.5")
    node = Node.objects.get(name="node-a")
    assert node.token_hash == token_hash(token)
    assert decrypt_secret(node.encrypted_token) == token
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM servers_node")
        stored = " ".join(str(value) for row in cursor.fetchall() for value in row)
    assert token not in stored


def test_it_never_logs_the_token(db, caplog):
    caplog.set_level(logging.DEBUG)
    token = createnode("node-a", "--url", "https://10.0.0.5:8444", "--address", "203.0.113.5")
    assert "node-a" in caplog.text
    assert token not in caplog.text


def test_it_reads_the_ca_file_and_ports(db, tmp_path, stand_in_agent):
    ca = tmp_path / "ca.pem"
    ca.write_text(stand_in_agent.ca_pem)
    createnode(
        "node-a", "--url", "https://127.0.0.1:8444", "--address", "127.0.0.1",
        "--ports", "28000-28009", "--ca-file", str(ca),
    )  # fmt: skip
    node = Node.objects.get(name="node-a")
    assert node.ca_pem.strip() == stand_in_agent.ca_pem.strip()
    assert (node.first_port, node.last_port, node.port_count) == (28000, 28009, 10)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["Bad Name", "--url", "https://h:1", "--address", "10.0.0.1"], "node name"),
        (["simulated", "--url", "https://h:1", "--address", "10.0.0.1"], "built-in"),
        (["n", "--url", "http://h:1", "--address", "10.0.0.1"], "HTTPS"),
        (["n", "--url", "https://h:1/x", "--address", "10.0.0.1"], "without a user, path"),
        (["n", "--url", "https://h:99999", "--address", "10.0.0.1"], "not valid"),
        (["n", "--url", "https://h:1", "--address", "example.com"], "not an IP address"),
        (["n", "--url", "https://h:1", "--address", "10.0.0.1", "--ports", "9-5"], "Ports"),
        (["n", "--url", "https://h:1", "--address", "10.0.0.1", "--ports", "80-90"], "1024"),
        (["n", "--url", "https://h:1", "--address", "10.0.0.1", "--ca-file", "/nope"], "Cannot"),
    ],
)
def test_it_refuses_a_bad_argument_with_a_clear_message(db, args, message):
    with pytest.raises(CommandError, match=message):
        createnode(*args)
    assert not Node.objects.exclude(name="simulated").exists()


def test_it_refuses_a_ca_file_without_a_certificate(db, tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate")
    with pytest.raises(CommandError, match="no PEM certificate"):
        createnode("n", "--url", "https://h:1", "--address", "10.0.0.1", "--ca-file", str(ca))


def test_it_refuses_a_second_node_of_the_same_name(db):
    register("node-a")
    with pytest.raises(CommandError, match="already a node named"):
        createnode("node-a", "--url", "https://10.0.0.5:8444", "--address", "203.0.113.5")


def test_it_finds_a_node_by_its_token_only(db):
    node, token = register("node-a")
    assert node_by_token(token) == node
    assert node_by_token(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert node_by_token("gsn_short") is None


def test_the_simulated_node_is_always_online(db):
    assert simulated_node().state() == NodeState.ONLINE


def test_a_node_is_online_for_30_seconds_after_a_heartbeat(db):
    node, _ = register("node-a")
    assert node.state() == NodeState.UNREACHABLE  # never heard from
    with freeze_time("2026-11-26 10:00:00"):
        beat(node)
    with freeze_time("2026-11-26 10:00:30"):
        assert node.state() == NodeState.ONLINE
    with freeze_time("2026-11-26 10:00:31"):
        assert node.state() == NodeState.UNREACHABLE


# Admin


def test_the_admin_lists_nodes_with_state_servers_and_free_ports(staff_client, demo_server):
    page = staff_client.get("/admin/servers/node/").content.decode()
    assert "node-1" in page and "online" in page
    assert "2 of 3" in page  # three ports, one taken by the demo server
    node = Node.objects.get(name="node-1")
    assert node.encrypted_token not in page


def test_the_admin_lists_each_nodes_url_and_address(staff_client):
    register("node-a", url="https://10.0.0.5:8444", address="203.0.113.5")
    page = staff_client.get("/admin/servers/node/").content.decode()
    assert '<td class="field-url">https://10.0.0.5:8444</td>' in page
    assert '<td class="field-address">203.0.113.5</td>' in page


def test_the_admin_change_page_shows_no_secret(staff_client, agent_node):
    page = staff_client.get(f"/admin/servers/node/{agent_node.pk}/change/").content.decode()
    assert agent_node.encrypted_token not in page
    assert (agent_node.token_hash or "") not in page
    assert "encrypted_token" not in page


def test_the_admin_rotates_a_token_and_shows_it_once(staff_client, agent_node, node_token, caplog):
    caplog.set_level(logging.DEBUG)
    response = staff_client.post(
        "/admin/servers/node/",
        {"action": "rotate_token", "_selected_action": [agent_node.pk]},
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    (new,) = TOKEN.findall(response.content.decode())
    assert node_by_token(new) == agent_node
    assert node_by_token(node_token) is None
    page = staff_client.get("/admin/servers/node/").content.decode()
    assert new not in page
    assert new not in caplog.text


def test_a_node_is_unreachable_when_its_heartbeat_is_old(db):
    node, _ = register("node-a")
    Node.objects.filter(id=node.id).update(last_heartbeat_at=timezone.now() - timedelta(minutes=5))
    node.refresh_from_db()
    assert node.state() == NodeState.UNREACHABLE


def test_the_admin_shows_memory_and_disk_committed_of_capacity(staff_client, demo_server):
    Node.objects.filter(name="node-1").update(
        memory_mb=8192, disk_mb=20480, overallocate_percent=20
    )
    page = staff_client.get("/admin/servers/node/").content.decode()
    assert "1024 of 8192 MB + 20 %" in page
    assert "10240 of 20480 MB + 20 %" in page


@pytest.mark.parametrize(("action", "drained"), [("drain", True), ("undrain", False)])
def test_the_admin_drains_and_undrains_a_node(staff_client, agent_node, action, drained):
    Node.objects.filter(id=agent_node.id).update(drained=not drained)
    staff_client.post(
        "/admin/servers/node/", {"action": action, "_selected_action": [agent_node.pk]}
    )
    assert Node.objects.get(id=agent_node.id).drained is drained


def test_staffs_node_changes_are_in_the_nodes_admin_history(staff_client, agent_node):
    staff_client.post(
        "/admin/servers/node/", {"action": "drain", "_selected_action": [agent_node.pk]}
    )
    page = staff_client.get(f"/admin/servers/node/{agent_node.pk}/history/").content.decode()
    assert "drained" in page
