"""`demo` with a local node (what `make run` does) and `startservers`: the demo organization's
servers are `demo` games on node `local`, whose token is written where the agent reads it."""

import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from servers.fleet.nodes import node_by_token
from servers.models import Node, Server, ServerState
from tests.servers.agent_standin import StandInAgent
from tests.servers.node_fixtures import beat

pytestmark = pytest.mark.django_db

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
dev_agent_cert = __import__("dev-agent-cert")


@pytest.fixture(name="local_node_env")
def local_node_env_fixture(monkeypatch, tmp_path) -> Path:
    dev_agent_cert.make(tmp_path)
    monkeypatch.setenv("DEMO_NODE_URL", "https://127.0.0.1:8444")
    monkeypatch.setenv("DEMO_NODE_CA_FILE", str(tmp_path / "cert.pem"))
    monkeypatch.setenv("DEMO_NODE_TOKEN_FILE", str(tmp_path / "token"))
    return tmp_path / "token"


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=out)
    return out.getvalue()


def test_it_puts_the_demo_organizations_servers_on_the_local_node_as_demo_games(local_node_env):
    run("demo")
    servers = Server.objects.filter(organization__slug="demo")
    assert {(s.node.name, s.game) for s in servers} == {("local", "demo")}
    assert Server.objects.get(organization__slug="rival").node.name == "simulated"


def test_it_writes_a_working_token_for_the_agent_readable_by_its_owner_only(local_node_env):
    run("demo")
    node = node_by_token(local_node_env.read_text().strip())
    assert node is not None and node.name == "local"
    assert local_node_env.stat().st_mode & 0o777 == 0o600


def test_it_keeps_the_token_and_the_servers_on_every_run(local_node_env):
    run("demo")
    token, servers = local_node_env.read_text(), set(Server.objects.values_list("id", flat=True))
    run("demo")
    assert local_node_env.read_text() == token
    assert set(Server.objects.values_list("id", flat=True)) == servers


def test_it_makes_a_new_token_when_the_file_is_lost(local_node_env):
    run("demo")
    old = local_node_env.read_text().strip()
    local_node_env.unlink()
    run("demo")
    assert node_by_token(old) is None
    assert node_by_token(local_node_env.read_text().strip()) == Node.objects.get(name="local")


def test_startservers_starts_the_stopped_servers_on_an_online_agent_node(
    acme, demo_server, stand_in_agent: StandInAgent
):
    out = run("startservers", "acme")
    assert f"{demo_server.id} Demo: starting on node-1" in out
    assert Server.objects.get(id=demo_server.id).state == ServerState.STARTING


def test_startservers_names_a_server_whose_node_is_unreachable(acme, demo_server, agent_node):
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=None)
    out = run("startservers", "acme")
    assert f"{demo_server.id} Demo: not started" in out
    assert Server.objects.get(id=demo_server.id).state == ServerState.STOPPED


def test_startservers_waits_for_a_node_that_comes_online(acme, demo_server, agent_node, settings):
    Node.objects.filter(id=agent_node.id).update(last_heartbeat_at=None)
    beat(agent_node)  # online by the time it looks
    out = run("startservers", "acme", "--wait", "5")
    assert "starting on node-1" in out


class _AnsweredOnce(dict):
    """Scripted answers that are given once each; then the stand-in answers as usual."""

    def get(self, key, default=None):
        return self.pop(key, default)


def test_startservers_tries_again_while_the_node_is_unavailable_within_the_wait(
    acme, demo_server, stand_in_agent: StandInAgent
):
    """As after a make run that ended: the node's last heartbeat still looks fresh, but the
    agent starting now does not answer yet. Once it does, the server is started."""
    start = ("POST", f"/v1/servers/{demo_server.id}/start")
    stand_in_agent.answers = _AnsweredOnce({start: (503, {"error": {"code": "starting"}})})
    out = run("startservers", "acme", "--wait", "30")
    assert f"{demo_server.id} Demo: starting on node-1" in out
    assert len(stand_in_agent.calls("POST")) == 2
