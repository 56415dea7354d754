"""No call to a node runs inside a transaction or holds a row lock: when the agent gets the
call, the decision is committed (another connection sees it) and no row is locked."""

import threading
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from audit.actors import Actor
from servers.models import Node, Server
from servers.services import PowerAction, server_power, server_send_command
from tests.servers.agent_standin import AgentRequest, StandInAgent
from tests.webhooks.worker_cluster import ON_POSTGRES

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not ON_POSTGRES, reason="row locks are PostgreSQL's (NOWAIT)"),
]


class Observer:
    """What another connection sees while the agent handles a call."""

    def __init__(self, server: Server) -> None:
        self.server_id, self.node_id = server.id, server.node_id
        self.seen: list[dict[str, Any]] = []

    def __call__(self, request: AgentRequest) -> None:
        try:  # this thread has its own connection
            with transaction.atomic():
                locked = Server.objects.select_for_update(nowait=True).get(id=self.server_id)
                Node.objects.select_for_update(nowait=True).get(id=self.node_id)
                self.seen.append({"path": request.path, "state": locked.state, "locked": False})
        except DatabaseError:
            self.seen.append({"path": request.path, "locked": True})
        finally:
            connection.close()


def watched(server: Server, agent: StandInAgent) -> Observer:
    observer = Observer(server)
    agent.on_request = observer
    return observer


def test_a_start_is_committed_before_the_node_is_called(demo_server, stand_in_agent):
    observer = watched(demo_server, stand_in_agent)
    server_power(server=demo_server, action=PowerAction.START, actor=Actor.system("test"))
    assert observer.seen == [
        {"path": f"/v1/servers/{demo_server.id}/start", "state": "starting", "locked": False}
    ]


def test_a_console_command_holds_no_lock_while_the_node_is_called(
    demo_server, stand_in_agent, put_in_state
):
    put_in_state(demo_server, "running")
    observer = watched(demo_server, stand_in_agent)
    server_send_command(server=demo_server, command="say hi", actor=Actor.system("test"))
    assert [seen["locked"] for seen in observer.seen] == [False]


def test_the_observer_sees_a_lock_when_one_is_held(demo_server, stand_in_agent):
    """The check above can fail: a call made while the row is locked is seen as locked."""
    observer = watched(demo_server, stand_in_agent)
    with transaction.atomic():
        Server.objects.select_for_update().get(id=demo_server.id)
        thread = threading.Thread(target=observer, args=(AgentRequest("POST", "/x", None, {}),))
        thread.start()
        thread.join()
    assert observer.seen == [{"path": "/x", "locked": True}]
