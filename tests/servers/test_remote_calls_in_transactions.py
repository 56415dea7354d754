"""A call to an agent or to the bucket inside `transaction.atomic` is refused before it leaves
the process (`gshost.handoff.require_outside_transaction`); the same call after commit goes.

Most tests here run inside pytest-django's wrapping transaction: the guard does not count the
test case's own blocks, only those the code opens, as the last test (a real transaction, no
test case block around it) shows."""

import pytest
from django.db import transaction

from gshost.errors import CalledInsideTransaction
from servers.agents.runtime import agent_call
from servers.backups import object_storage
from servers.models import Node
from tests.servers.agent_standin import StandInAgent
from tests.servers.seaweedfs import SeaweedFS

STATUS = "/v1/status"


def test_an_agent_call_inside_a_transaction_raises_and_sends_nothing(
    agent_node: Node, stand_in_agent: StandInAgent
):
    refused = pytest.raises(CalledInsideTransaction, match="agent call GET /v1/status")
    with refused, transaction.atomic():
        agent_call(agent_node, "GET", STATUS)

    assert stand_in_agent.requests == []


def test_an_agent_call_outside_a_transaction_reaches_the_agent(
    agent_node: Node, stand_in_agent: StandInAgent
):
    stand_in_agent.answer("GET", STATUS, 200, {"ok": True})

    assert agent_call(agent_node, "GET", STATUS) == {"ok": True}
    assert [request.path for request in stand_in_agent.requests] == [STATUS]


def test_a_bucket_call_inside_a_transaction_raises_and_deletes_nothing(
    db: None, bucket: str, seaweedfs: SeaweedFS
):
    seaweedfs.write(bucket, "backups/kept.tar.gz", b"archive")

    refused = pytest.raises(CalledInsideTransaction, match="bucket's delete_object")
    with refused, transaction.atomic():
        object_storage.object_delete("backups/kept.tar.gz")

    assert seaweedfs.keys(bucket) == ["backups/kept.tar.gz"]


def test_a_bucket_call_once_the_transaction_ended_goes(db: None, bucket: str, seaweedfs: SeaweedFS):
    seaweedfs.write(bucket, "backups/gone.tar.gz", b"archive")

    with transaction.atomic():
        pass
    object_storage.object_delete("backups/gone.tar.gz")

    assert seaweedfs.keys(bucket) == []


@pytest.mark.django_db(transaction=True)
def test_a_real_transaction_is_refused_the_same_way(bucket: str, seaweedfs: SeaweedFS):
    seaweedfs.write(bucket, "backups/kept.tar.gz", b"archive")

    with pytest.raises(CalledInsideTransaction), transaction.atomic():
        object_storage.object_size("backups/kept.tar.gz")

    assert object_storage.object_size("backups/kept.tar.gz") == len(b"archive")
