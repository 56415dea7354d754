"""The simulated node's agent, in process: the one runtime calls it as it calls an agent, and
it answers the agent's routes in the agent's shapes (docs/agent-protocol.md)."""

import json

import pytest
from django.utils import timezone
from freezegun import freeze_time

from audit.actors import Actor
from gshost_agent.protocol import ConsoleOutput, server_route
from servers.backups.jobs import backup_create, backup_restore
from servers.models import Job, JobState, Server, ServerTransition
from servers.runtime import runtime_sweep
from servers.services import PowerAction, server_power, server_send_command
from servers.simulated import agent
from servers.simulated.agent import SIMULATED_AGENT

ME = Actor.system("test")


def answered(method, path, body=None, params=None):
    status, raw = SIMULATED_AGENT.answer(method, path, body=body, params=params)
    return status, json.loads(raw)


def test_every_request_goes_to_the_simulated_nodes_agent_through_the_agent_call(
    acme_server, monkeypatch
):
    calls = []
    real_answer = SIMULATED_AGENT.answer

    def recorded(method, path, **given):
        calls.append((method, path))
        return real_answer(method, path, **given)

    monkeypatch.setattr(SIMULATED_AGENT, "answer", recorded)
    server_power(server=acme_server, action=PowerAction.START, actor=ME)
    assert calls == [("POST", server_route(acme_server.id, "start"))]


def test_a_route_it_does_not_serve_is_not_found(acme_server):
    status, body = answered("GET", server_route(acme_server.id, "files"))
    assert (status, body["error"]["code"]) == (404, "not_found")


def test_a_server_on_another_node_is_not_one_it_knows(demo_server):
    status, body = answered("POST", server_route(demo_server.id, "stop"))
    assert (status, body["error"]["code"]) == (404, "server_not_found")


def test_a_start_body_the_protocol_refuses_is_a_bad_request(acme_server):
    status, body = answered("POST", server_route(acme_server.id, "start"), {"game": "minecraft"})
    assert (status, body["error"]["code"]) == (400, "invalid_request")


def test_a_kill_that_no_longer_applies_is_refused_as_the_agent_refuses_it(acme_server):
    status, body = answered("POST", server_route(acme_server.id, "kill"))  # it is stopped
    assert (status, body["error"]["code"]) == (409, "invalid_state")


def test_a_job_it_was_not_given_is_not_found(acme_server):
    job = {"job_id": "job_" + "a" * 20, "kind": "wipe", "game": acme_server.game}
    status, body = answered("POST", server_route(acme_server.id, "jobs"), job)
    assert (status, body["error"]["code"]) == (404, "not_found")


def test_its_console_answers_in_the_agents_shape(acme_server, put_in_state):
    put_in_state(acme_server, "running")
    server_send_command(server=acme_server, command="say hello", actor=ME)
    status, body = answered("GET", server_route(acme_server.id, "console"), params={"after": "0"})
    output = ConsoleOutput.from_json(body)
    assert status == 200
    assert "> say hello" in [line.text for line in output.lines]


def test_a_console_line_number_that_is_not_one_is_a_bad_request(acme_server):
    path = server_route(acme_server.id, "console")
    status, body = answered("GET", path, params={"after": "-1"})
    assert (status, body["error"]["code"]) == (400, "invalid_request")


def test_a_finished_backup_has_a_checksum_and_its_restore_is_carried_out(acme_server):
    with freeze_time(timezone.now()) as frozen:
        backup, _job = backup_create(server=acme_server, actor=ME)
        frozen.tick(5)
        runtime_sweep(timezone.now())
        backup.refresh_from_db()
        restore = backup_restore(server=Server.objects.get(id=acme_server.id), backup=backup,
                                 actor=ME)  # fmt: skip
        frozen.tick(5)
        runtime_sweep(timezone.now())
    assert len(backup.sha256) == 64
    assert Job.objects.get(id=restore.id).state == JobState.SUCCEEDED


@pytest.mark.parametrize("state", ["stopped", "running"])
def test_its_readings_are_invented_for_any_state(acme_server, put_in_state, state):
    put_in_state(acme_server, state)
    now = timezone.now()
    reading = agent.simulated_reading(Server.objects.get(id=acme_server.id), now)
    assert reading.sampled_at == now and reading.network_in_kbps is not None
    assert reading.players_online == len(reading.players) <= (reading.max_players or 0)


def test_what_it_finishes_is_told_as_an_agents_report_is(acme_server):
    with freeze_time(timezone.now()) as frozen:
        server_power(server=acme_server, action=PowerAction.START, actor=ME)
        frozen.tick(5)
        runtime_sweep(timezone.now())
    finished = ServerTransition.objects.filter(server=acme_server).latest("at")
    assert (finished.to_state, finished.cause) == ("running", "node simulated: ready")
