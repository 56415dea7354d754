"""The panel and nodes: the node shown on the server pages, and the live console's JSON feed
(`/panel/servers/<id>/console/lines?after=N`, needs servers:read like the server page; on an
agent node, tests/servers/test_console_mirror.py)."""

import pytest
from django.test import Client

from accounts.services import member_add
from audit.actors import Actor
from servers.models import Node
from servers.services import server_send_command
from tests.servers.node_fixtures import register

PANEL = "/panel/servers/"


def lines_url(server, after=None):
    return f"{PANEL}{server.id}/console/lines" + ("" if after is None else f"?after={after}")


def signed_in(membership) -> Client:
    client = Client()
    client.force_login(membership.user)
    return client


def send(server, command):
    return server_send_command(server=server, command=command, actor=Actor.system("test"))


def test_the_list_shows_each_servers_node(alice_client, acme_server, demo_server):
    html = alice_client.get(PANEL).content.decode()
    assert '<th scope="col">Node</th>' in html
    assert "<code>simulated</code>" in html and "<code>node-1</code>" in html


def test_the_server_page_shows_its_node(alice_client, demo_server):
    html = alice_client.get(f"{PANEL}{demo_server.id}").content.decode()
    assert "node <code data-server-node>node-1</code>" in html


def test_the_server_page_loads_the_live_console_from_a_static_file(alice_client, acme_server):
    html = alice_client.get(f"{PANEL}{acme_server.id}").content.decode()
    assert "js/console-lines.js" in html and "defer" in html
    assert f'data-lines-url="{lines_url(acme_server)}"' in html
    assert "<script>" not in html  # the CSP allows no inline script


def test_the_console_lines_of_a_simulated_server_are_its_commands_and_answers(
    alice_client, acme_server, put_in_state
):
    put_in_state(acme_server, "running")
    send(acme_server, "say hello")
    body = alice_client.get(lines_url(acme_server)).json()
    assert [line["text"] for line in body["lines"]] == ["> say hello", "[Server] hello"]
    assert body["last"] == body["lines"][-1]["n"]


def test_the_console_lines_after_the_last_are_only_the_new_ones(
    alice_client, acme_server, put_in_state
):
    put_in_state(acme_server, "running")
    send(acme_server, "say one")
    last = alice_client.get(lines_url(acme_server)).json()["last"]
    body = alice_client.get(lines_url(acme_server, last)).json()
    assert body == {"lines": [], "last": last, "as_of": None, "age_seconds": None}  # live
    send(acme_server, "say two")
    body = alice_client.get(lines_url(acme_server, last)).json()
    assert [line["text"] for line in body["lines"]] == ["> say two", "[Server] two"]


def test_the_console_lines_of_an_unreachable_node_are_503(alice_client, demo_server, agent_node):
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=None)
    response = alice_client.get(lines_url(demo_server))
    assert response.status_code == 503
    assert response["Retry-After"] == "30"
    assert response.json()["error"]["code"] == "node_unavailable"


def test_the_server_page_of_an_unreachable_node_shows_the_last_known_state(
    alice_client, demo_server, agent_node
):
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=None)
    response = alice_client.get(f"{PANEL}{demo_server.id}")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Node unavailable." in html and "state-stopped" in html


def test_a_member_with_servers_read_reads_the_console_lines(bob, acme_server):
    assert signed_in(bob).get(lines_url(acme_server)).status_code == 200


def test_a_member_without_servers_read_may_not_read_the_console_lines(acme, acme_server):
    dave = member_add(
        organization=acme, email="dave@acme.test", password="dave-pw-123", member_scopes=[]
    )
    assert signed_in(dave).get(lines_url(acme_server)).status_code == 403


def test_another_organizations_console_lines_are_404(charlie, acme_server):
    assert signed_in(charlie).get(lines_url(acme_server)).status_code == 404


@pytest.mark.parametrize("after", ["-1", "x", "1.5", "9" * 30])
def test_a_bad_after_is_400(alice_client, acme_server, after):
    assert alice_client.get(lines_url(acme_server, after)).status_code == 400


def test_the_console_lines_need_a_console(alice_client, acme_server):
    acme_server.disabled_capabilities = ["console"]
    acme_server.save()
    assert alice_client.get(lines_url(acme_server)).status_code == 403


def test_a_node_with_no_servers_is_not_shown_to_customers(alice_client, acme_server):
    register("empty-node")
    assert "empty-node" not in alice_client.get(PANEL).content.decode()


def test_a_power_action_on_an_unreachable_node_is_refused_with_a_message(
    alice_client, demo_server, agent_node
):
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=None)
    response = alice_client.post(f"{PANEL}{demo_server.id}/power", {"action": "start"}, follow=True)
    assert "node-1 is unavailable" in response.content.decode()
    demo_server.refresh_from_db()
    assert demo_server.state == "stopped"


def test_the_settings_page_of_an_unreachable_node_shows_the_template_settings(
    alice_client, demo_server, agent_node
):
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=None)
    response = alice_client.get(f"{PANEL}{demo_server.id}/settings")
    assert response.status_code == 200
    html = response.content.decode()
    assert "max-players" in html and "Cannot compare now" in html


def test_settings_of_a_template_game_are_saved_from_the_panel(alice_client, demo_server):
    response = alice_client.post(
        f"{PANEL}{demo_server.id}/settings",
        {"motd": "Hi", "max-players": "30", "difficulty": "hard"},
    )
    assert response.status_code == 302
    demo_server.refresh_from_db()
    assert demo_server.desired_settings == {"motd": "Hi", "max-players": "30", "difficulty": "hard"}


def test_a_backup_asked_of_an_unreachable_node_in_the_panel_says_so(
    alice_client, demo_server, agent_node
):
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=None)
    response = alice_client.post(f"{PANEL}{demo_server.id}/backups/new", {"name": "b"}, follow=True)
    assert response.status_code == 200
    assert "unavailable" in response.content.decode()
    assert not demo_server.backups.exists()
