"""The admin's "Migrate to node…" action: a form to choose the agent node, then a migration
begun for each server chosen (a worker does the move: tests/servers/test_node_migration.py);
and moves between agent nodes whose worker died, failed by the minute's sweep."""

from datetime import timedelta

import pytest
from django.utils import timezone
from freezegun import freeze_time

from audit.actors import Actor
from servers.agents.transfers import (
    migration_to_node_begin,
    migration_to_node_run,
    migrations_to_node_expire,
)
from servers.errors import MigrationRefused
from servers.models import MigrationState, Node, ServerMigration
from servers.readings import migration_status
from servers.runtime import runtime_sweep
from tests.servers.node_fixtures import beat, register


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


def test_a_move_whose_worker_died_is_failed_after_35_minutes(demo_server, other_node):
    migration = migration_to_node_begin(
        server=demo_server, target=other_node, actor=Actor.system("t")
    )
    migrations_to_node_expire(timezone.now() + timedelta(minutes=34))
    assert ServerMigration.objects.get(id=migration.id).state == MigrationState.MIGRATING

    migrations_to_node_expire(timezone.now() + timedelta(minutes=36))

    failed = ServerMigration.objects.get(id=migration.id)
    assert (failed.state, failed.error) == (
        MigrationState.FAILED,
        "the move did not finish in time",
    )
    assert migration_status(demo_server)["error"] == "the move did not finish in time"


def test_the_simulated_hosts_do_not_finish_a_move_between_agent_nodes(demo_server, other_node):
    migration = migration_to_node_begin(
        server=demo_server, target=other_node, actor=Actor.system("t")
    )
    with freeze_time(timezone.now() + timedelta(hours=1)):
        runtime_sweep(timezone.now())
    assert ServerMigration.objects.get(id=migration.id).state == MigrationState.MIGRATING


def test_a_move_whose_task_arrives_twice_is_run_once(demo_server, other_node):
    migration = migration_to_node_begin(
        server=demo_server, target=other_node, actor=Actor.system("t")
    )
    ServerMigration.objects.filter(id=migration.id).update(run_started_at=timezone.now())

    again = migration_to_node_run(migration_id=migration.id)  # no agent is asked anything

    assert again.state == MigrationState.MIGRATING
    assert demo_server.node_id != other_node.id


def test_a_move_to_a_node_without_room_for_the_plan_is_refused(demo_server, other_node):
    Node.objects.filter(id=other_node.id).update(memory_mb=512)
    with pytest.raises(MigrationRefused, match="no room for this server's memory"):
        migration_to_node_begin(server=demo_server, target=other_node, actor=Actor.system("t"))
