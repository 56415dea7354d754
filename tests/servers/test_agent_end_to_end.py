"""End to end on an agent node, with every piece real: the public API and the agents' report
routes served by gunicorn, the `qcluster` worker, a local HTTPS webhook receiver, and
`gshost-agent` starting real game processes (the demo game) under its keepers.

What the receiver gets comes from what the game processes did: a power start becomes a real
process whose ready line is `server.started`; a SIGKILL of it is `server.crashed` with
`signal: 9`. PostgreSQL and Redis only (tests/servers/agent_rig.py says why); the agent runs as
root, as in production, so its games run as the unprivileged game user.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from django.test import Client
from django.utils import timezone

from accounts.models import Membership, Organization
from audit.actors import Actor
from servers.models import Node, Server, ServerTransition
from servers.services import server_create
from tests.agent.conftest import Agent, AgentFactory, certificates, games_dir, wait_for_exit
from tests.processes import resident_kib
from tests.servers.agent_rig import (
    ROOT,
    Api,
    Web,
    events_at,
    game_credentials,
    probe_as,
    processes_in,
    register_agent_node,
    wait_until,
)
from tests.webhooks.delivery_fixtures import HOST, Hooks, expected_signature
from tests.webhooks.receiver import HttpsReceiver
from tests.webhooks.worker_cluster import (
    needs_postgres_and_redis,
    purge_queued_tasks,
    start_cluster,
    stop_cluster,
    worker_environment,
)
from webhooks.models import Delivery

__all__ = ["certificates", "games_dir"]  # the agent tests' fixtures, used here too

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    needs_postgres_and_redis,
    pytest.mark.skipif(os.geteuid() != 0, reason="the agent runs as root, as in production"),
]

EVENT_TIMEOUT = 30.0


# The rig: one receiver, worker and web service for the module; a node and its agent per test.


@pytest.fixture(scope="module")
def receiver() -> Iterator[HttpsReceiver]:
    with HttpsReceiver(names=(HOST,)) as started:
        yield started


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agent-e2e")


@pytest.fixture(scope="module")
def worker(
    django_db_setup: None, django_db_blocker: Any, receiver: HttpsReceiver, work: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with django_db_blocker.unblock():
        purge_queued_tasks()
        process = start_cluster(receiver, work / "qcluster.log", Q_WORKERS="2")
    yield process
    stop_cluster(process)


@pytest.fixture(scope="module")
def web(
    django_db_setup: None, django_db_blocker: Any, receiver: HttpsReceiver, work: Path
) -> Iterator[Web]:
    with django_db_blocker.unblock():
        started = Web(receiver, work)
    yield started
    started.stop()


@pytest.fixture
def agents(certificates: dict[str, Path], games_dir: Path, web: Web) -> Iterator[AgentFactory]:
    factory = AgentFactory(certificates, games_dir, web)  # type: ignore[arg-type]
    yield factory
    factory.clean_up()


@pytest.fixture
def node_and_agent(
    db: None, agents: AgentFactory, certificates: dict[str, Path], web: Web
) -> tuple[Node, Agent]:
    """A registered node whose agent runs and has sent its first heartbeat."""
    node, agent, _token = register_agent_node(agents, certificates, web)
    agent.start()
    wait_until(
        lambda: Node.objects.get(id=node.id).last_heartbeat_at is not None, 20, "a heartbeat"
    )
    return node, agent


@pytest.fixture
def node(node_and_agent: tuple[Node, Agent]) -> Node:
    return node_and_agent[0]


@pytest.fixture
def agent(node_and_agent: tuple[Node, Agent]) -> Agent:
    return node_and_agent[1]


@pytest.fixture
def hooks(acme: Organization, receiver: HttpsReceiver, worker: Any) -> Hooks:
    made = Hooks(acme, receiver)
    made.webhook("/servers")
    return made


@pytest.fixture
def api(make_key: Any, web: Web, hooks: Hooks) -> Api:
    key = make_key(["servers:power", "servers:read", "console:write"])
    return Api(web, key.full_key)


def new_server(acme: Organization, node: Node, name: str = "Demo") -> Server:
    return server_create(
        actor=Actor.system("test"), organization=acme, name=name, game="demo", node=node
    )


def started(api: Api, receiver: HttpsReceiver, server: Server) -> dict[str, Any]:
    """Power start through the API, then wait for `server.started` at the receiver."""
    answer = api.post(f"/servers/{server.id}/power", {"action": "start"})
    assert answer.status_code == 202, answer.text
    [event] = wait_until(
        lambda: events_at(receiver, server.id, "server.started"), EVENT_TIMEOUT, "server.started"
    )
    return event


@pytest.fixture
def running(acme: Organization, node: Node, api: Api, receiver: HttpsReceiver) -> Server:
    server = new_server(acme, node)
    started(api, receiver, server)
    return server


def crashed(receiver: HttpsReceiver, server: Server) -> dict[str, Any]:
    [event] = wait_until(
        lambda: events_at(receiver, server.id, "server.crashed"), EVENT_TIMEOUT, "server.crashed"
    )
    return event


# The tests


def test_a_power_start_through_the_api_runs_a_real_game_and_server_started_arrives(
    acme: Organization,
    node: Node,
    agent: Agent,
    api: Api,
    receiver: HttpsReceiver,
    hooks: Hooks,
) -> None:
    server = new_server(acme, node)
    event = started(api, receiver, server)

    [request] = [r for r in receiver.requests if json.loads(r.body) == event]
    [secret] = hooks.secrets.values()
    timestamp = request.header("X-Webhook-Timestamp") or ""
    assert request.header("X-Webhook-Signature") == expected_signature(
        secret, timestamp, request.body
    )
    assert event["event"] == "server.started"
    assert event["data"] == {"previous_state": "starting"}
    pid = agent.game_process(server.id).pid
    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"--port" in command and str(server.port).encode() in command
    # Its cwd is its server's directory (`/server` inside its sandbox): the same file.
    cwd = Path(f"/proc/{pid}/cwd").stat()
    directory = (agent.data_dir / "servers" / server.id).stat()
    assert (cwd.st_dev, cwd.st_ino) == (directory.st_dev, directory.st_ino)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5):
        pass  # the game listens on the port the control plane gave it
    assert api.get(f"/servers/{server.id}").json()["state"] == "running"


def test_a_sigkill_of_the_game_arrives_as_server_crashed_with_signal_9(
    agent: Agent, running: Server, receiver: HttpsReceiver
) -> None:
    pid = agent.game_process(running.id).pid
    os.kill(pid, signal.SIGKILL)

    event = crashed(receiver, running)
    assert event["data"]["reason"] == "exited"
    assert event["data"]["signal"] == 9
    assert event["data"]["exit_code"] is None
    assert event["data"]["oom"] is False
    assert "ready on port" in " ".join(event["data"]["last_output"])
    assert Server.objects.get(id=running.id).state == "stopped"


def test_no_game_process_runs_as_root(
    acme: Organization, node: Node, agent: Agent, api: Api, receiver: HttpsReceiver
) -> None:
    servers = [new_server(acme, node, "One"), new_server(acme, node, "Two")]
    for server in servers:
        started(api, receiver, server)

    for server in servers:
        game = agent.game_process(server.id)
        for pid in [game.pid, *(child.pid for child in game.children(recursive=True))]:
            ids = game_credentials(pid)
            assert 0 not in ids["uid"] and 0 not in ids["gid"] and 0 not in ids["groups"]
    first, second = (game_credentials(agent.game_process(s.id).pid) for s in servers)
    assert first["gid"] != second["gid"]  # a group of its own server each
    # Nothing working in a server's directory is root either, but the sandbox's own
    # bubblewrap, which drops to the game's user before the game runs.
    in_servers = [pid for pid in processes_in(agent.data_dir / "servers") if not _is_bwrap(pid)]
    assert all(0 not in game_credentials(pid)["uid"] for pid in in_servers)


def _is_bwrap(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "bwrap"
    except OSError:
        return False


def test_a_game_cannot_read_the_agents_token_or_another_servers_files(
    acme: Organization, node: Node, agent: Agent, api: Api, receiver: HttpsReceiver
) -> None:
    one, two = new_server(acme, node, "One"), new_server(acme, node, "Two")
    started(api, receiver, one)
    started(api, receiver, two)
    token = agent.env["AGENT_TOKEN"]
    game = agent.game_process(one.id).pid
    assert token.encode() not in Path(f"/proc/{game}/environ").read_bytes()

    other = agent.data_dir / "servers" / two.id
    own = agent.data_dir / "servers" / one.id
    assert agent.process is not None
    paths = [
        f"/proc/{agent.process.pid}/environ",  # the token is in the agent's environment only
        f"/proc/{agent.game_process(two.id).pid}/environ",
        str(other),
        str(other / "server.properties"),
        str(agent.data_dir / "run"),
        str(agent.data_dir / "outbox"),
        str(own / "server.properties"),
    ]
    seen = probe_as(game_credentials(game), paths)
    assert seen == {
        **{path: "PermissionError" for path in paths[:-1]},
        str(own / "server.properties"): "readable",  # the probe has the game's rights
    }


def test_simulate_crash_kills_the_real_process_and_server_crashed_arrives(
    agent: Agent, running: Server, receiver: HttpsReceiver
) -> None:
    pid = agent.game_process(running.id).pid
    env = worker_environment(receiver)
    done = subprocess.run(
        [sys.executable, "manage.py", "simulate", running.id, "crash"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "SIGKILL" in done.stdout

    event = crashed(receiver, running)
    assert event["data"]["signal"] == 9
    wait_for_exit(pid)


def test_a_console_command_through_the_api_reaches_the_game_and_its_answer_is_in_the_console(
    alice: Membership, agent: Agent, running: Server, api: Api, web: Web
) -> None:
    answer = api.post(f"/servers/{running.id}/console", {"command": "say hello from the API"})
    assert answer.status_code == 202, answer.text

    panel = requests.Session()
    panel.trust_env = False
    client = Client()
    client.force_login(alice.user)  # a session the web service reads from the database
    panel.cookies.set("sessionid", client.cookies["sessionid"].value)
    url = f"{web.url}/panel/servers/{running.id}/console/lines?after=0"

    def answered() -> bool:
        lines = panel.get(url, timeout=10).json()["lines"]
        return "[say] hello from the API" in [line["text"] for line in lines]

    wait_until(answered, 10, "the game's answer in the console lines")


def test_players_from_real_tcp_clients_are_listed_through_the_api(
    agent: Agent, running: Server, api: Api
) -> None:
    clients = []
    try:
        for name in ("alice", "bob"):
            client = socket.create_connection(("127.0.0.1", running.port), timeout=10)
            clients.append(client)
            client.sendall(f"JOIN {name}\n".encode())
            assert client.makefile().readline().startswith(f"WELCOME {name}")

        def both() -> Any:
            time.sleep(0.5)  # the list comes with the node's next heartbeat (every 10 s)
            body = api.get(f"/servers/{running.id}/players").json()
            print(body)
            return body if body.get("count") == 2 else None

        body = wait_until(both, 30, "two players listed")
        assert sorted(player["name"] for player in body["players"]) == ["alice", "bob"]
        assert body["max"] == 20
    finally:
        for client in clients:
            client.close()


def test_realtime_stats_come_from_the_real_process(agent: Agent, running: Server, api: Api) -> None:
    pid = agent.game_process(running.id).pid
    with socket.create_connection(("127.0.0.1", running.port), timeout=10) as player:
        player.sendall(b"JOIN carol\n")
        player.makefile().readline()

        def with_the_player() -> Any:
            body = api.get(f"/servers/{running.id}/realtime-stats").json()
            return body if body["players_online"] == 1 else None

        body = wait_until(with_the_player, 15, "the player in the stats")
    game_mb = resident_kib(pid) / 1024
    assert body["state"] == "running"
    assert game_mb > 5 and abs(body["memory_mb"] - game_mb) < 5, (body, game_mb)
    assert body["memory_limit_mb"] == 1024
    assert body["uptime_seconds"] >= 0 and body["cpu_percent"] >= 0


def test_an_agent_away_answers_503_and_a_crash_meanwhile_arrives_once_when_it_is_back(
    node: Node, agent: Agent, running: Server, api: Api, receiver: HttpsReceiver
) -> None:
    assert agent.process is not None
    agent.process.kill()  # SIGKILL: no goodbye; its keeper and game go on
    agent.process.wait()
    game = agent.game_process(running.id).pid

    # The heartbeat is still fresh: the agent refuses the connection.
    stop = api.post(f"/servers/{running.id}/power", {"action": "stop"})
    assert stop.status_code == 503, stop.text
    assert stop.json()["error"]["code"] == "node_unavailable"
    assert stop.headers["Retry-After"] == "30"
    assert api.get(f"/servers/{running.id}").json()["state"] == "running"  # still serving

    # 30 s without a heartbeat (set back, not waited for): the node is not even called.
    Node.objects.filter(id=node.id).update(last_heartbeat_at=timezone.now() - timedelta(seconds=31))
    stats = api.get(f"/servers/{running.id}/realtime-stats")
    assert stats.status_code == 503 and "no heartbeat" in stats.json()["error"]["message"]

    os.kill(game, signal.SIGKILL)  # the game crashes while the agent is away
    wait_for_exit(game)
    assert events_at(receiver, running.id, "server.crashed") == []

    agent.start()  # the same data directory: it finds the keeper and the exit
    event = crashed(receiver, running)
    assert event["data"]["signal"] == 9

    outbox = agent.data_dir / "outbox"
    wait_until(lambda: not list(outbox.glob("[0-9]*.json")), 20, "every report acknowledged")
    wait_until(
        lambda: not Delivery.objects.filter(server_id=running.id, status="pending").exists(),
        20,
        "every delivery attempted",
    )
    assert len(events_at(receiver, running.id, "server.crashed")) == 1
    assert Delivery.objects.filter(server_id=running.id, event="server.crashed").count() == 1
    assert Server.objects.get(id=running.id).state == "stopped"


def test_a_restore_of_a_running_server_stops_it_restores_and_starts_it_again(
    make_key: Any, agent: Agent, running: Server, web: Web, receiver: HttpsReceiver
) -> None:
    scopes = ["servers:read", "backups:create", "backups:read", "backups:restore"]
    api = Api(web, make_key(scopes).full_key)
    made = api.post(f"/servers/{running.id}/backups", {})
    assert made.status_code == 202, made.text
    backups = f"/servers/{running.id}/backups"
    wait_until(lambda: api.get(backups).json()["results"][0]["state"] == "available", 30, "backup")
    directory = agent.data_dir / "servers" / running.id
    world = (directory / "world.dat").read_bytes()
    (directory / "intruder.txt").write_text("not in the backup")
    pid = agent.game_process(running.id).pid

    restore = api.post(f"{backups}/{made.json()['backup']['id']}/restore", {})

    assert restore.status_code == 202, restore.text
    wait_until(
        lambda: len(events_at(receiver, running.id, "server.started")) == 2,
        EVENT_TIMEOUT,
        "server.started again",
    )
    job = api.get(f"{backups}/restore-jobs/{restore.json()['id']}").json()
    assert job["state"] == "succeeded"
    assert len(events_at(receiver, running.id, "server.stopped")) == 1
    moves = ServerTransition.objects.filter(server=running).order_by("at", "id")
    assert [m.to_state for m in moves] == [
        "starting", "running", "stopping", "stopped", "starting", "running"
    ]  # fmt: skip
    assert not (directory / "intruder.txt").exists()
    assert (directory / "world.dat").read_bytes() == world
    assert agent.game_process(running.id).pid != pid
    assert api.get(f"/servers/{running.id}").json()["state"] == "running"
