"""The admin's "Migrate to node…" action: a form to choose the agent node, then a migration
begun for each server chosen (a worker does the move: tests/servers/test_node_migration.py)."""

import pytest
from django.test import Client

from accounts.models import User
from servers.models import MigrationState, ServerMigration
from servers.readings import migration_status
from tests.servers.node_fixtures import beat, register


@pytest.fixture
def staff_client(db):
    staff = User.objects.create_superuser(email="staff@gshost.test", password="staff-pw-123")
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def other_node(db):
    node, _ = register("node-2", url="https://127.0.0.1:9", ports="28000-28001")
    beat(node)
    return node


def migrate_action(client, server, **fields):
    body = {"action": "migrate_to_node", "_selected_action": [server.id], **fields}
    return client.post("/admin/servers/server/", body, follow=True)


def test_it_asks_which_node_first(staff_client, demo_server, other_node):
    page = migrate_action(staff_client, demo_server).content.decode()

    assert "Migrate to another node" in page and "node-2" in page
    assert not ServerMigration.objects.exists()


def test_it_begins_the_move_to_the_node_chosen(staff_client, demo_server, other_node):
    page = migrate_action(staff_client, demo_server, apply="yes", target=other_node.id)

    migration = ServerMigration.objects.get(server=demo_server)
    assert (migration.state, migration.target_node) == (MigrationState.MIGRATING, other_node)
    assert migration.requested_by == "admin staff@gshost.test"
    assert migration_status(demo_server)["state"] == "migrating"
    assert "moving to node node-2" in page.content.decode()


def test_it_says_why_a_move_cannot_begin(staff_client, demo_server, agent_node):
    page = migrate_action(staff_client, demo_server, apply="yes", target=agent_node.id)

    assert "is not another agent node" in page.content.decode()
    assert not ServerMigration.objects.exists()
