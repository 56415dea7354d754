"""The console websocket of a real agent with real games (`GET /api/v1/servers/{id}/console`):
tokens signed by the control plane's key (here the test's own), the Origin check, the frames
in order, the limits and close codes, and withdrawals closing open sockets. The stand-in
control plane gives the agent its keys in the heartbeat's answer and, for a `send command`,
writes the command to the game as the real one does (through `POST /v1/.../console`)."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import jwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.agent.conftest import Agent, AgentFactory, new_server_id
from tests.agent.control_plane import ControlPlane
from tests.agent.lines import wait_until
from tests.ports import free_port

NODE = "node-a"
PANEL = "https://panel.example.test"
KEY = Ed25519PrivateKey.generate()
KID = "test-kid"
SHOUTER = """
import sys, time
print("ready", flush=True)
for command in sys.stdin:
    words = command.split()
    if words[0] == "shout":  # shout COUNT WIDTH RATE: COUNT lines WIDTH wide, RATE a second
        count, width, rate = (int(word) for word in words[1:])
        begun = time.monotonic()
        for n in range(count):
            print(f"{n:08d} " + "x" * width, flush=True)
            time.sleep(max(0.0, begun + (n + 1) / rate - time.monotonic()))
"""
SHOUTER_TEMPLATE = """
name = "shouter"
command = ["{python}", "-I", "{game_files}/shouter.py"]
files = ["shouter.py"]
ready_pattern = '^ready$'
stop_command = ""
stop_timeout_seconds = 2
"""


def published_key() -> dict[str, str]:
    raw = KEY.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    x = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    return {"kty": "OKP", "crv": "Ed25519", "kid": KID, "x": x}


def token(server_id: str, *, scopes=("servers:read",), key_id="Key00001", **claims: Any) -> str:
    now = time.time()
    body = {
        "aud": NODE,
        "sub": f"key:{key_id}",
        "server": server_id,
        "scopes": list(scopes),
        "jti": secrets.token_urlsafe(16),
        "iat": now,
        "exp": int(now) + 300,
        **claims,
    }
    return jwt.encode(body, KEY, algorithm="EdDSA", headers={"kid": KID})


class Commands:
    """The stand-in control plane's side of `send command`: each body, then the command
    written to the game, as the real one does once it has checked the token."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.agent: Agent | None = None
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.bodies.append(body)
        claims = jwt.decode(body["token"], options={"verify_signature": False})
        assert self.agent is not None
        answer = self.agent.console(claims["server"], body["command"])
        return (
            (202, {"command": body["command"]})
            if answer.ok
            else (answer.status_code, answer.json())
        )


@pytest.fixture(scope="module")
def commands() -> Commands:
    return Commands()


@pytest.fixture(scope="module")
def module_control_plane(commands: Commands) -> Iterator[ControlPlane]:
    console = {"keys": [published_key()], "origins": [PANEL]}
    plane = ControlPlane(port=free_port(), console_commands=commands)
    plane.heartbeat_answer = {"node": NODE, "console": console, "withdrawals": []}
    plane.up()
    yield plane
    plane.down()


@pytest.fixture(scope="module")
def console_agent(certificates, games_dir, module_control_plane, commands) -> Iterator[Agent]:
    (games_dir / "shouter.toml").write_text(SHOUTER_TEMPLATE)
    (games_dir / "shouter.py").write_text(SHOUTER)
    factory = AgentFactory(certificates, games_dir, module_control_plane)
    agent = factory.make()
    agent.start()
    commands.agent = agent
    wait_until(lambda: module_control_plane.heartbeats, timeout=10)
    yield agent
    factory.clean_up()


@pytest.fixture(scope="module")
def game(console_agent, module_control_plane) -> str:
    """A demo game, running, that has printed more than 150 lines."""
    server_id, _ = console_agent.start_server()
    module_control_plane.wait_for_report(server_id, "ready")
    for n in range(160):
        console_agent.console(server_id, f"say early {n}")
    console_agent.wait_for_console(server_id, r"^\[say\] early 159$")
    return server_id


def run(scenario: Any) -> Any:
    return asyncio.run(asyncio.wait_for(scenario, 60))


class Client:
    """A websocket client of the agent's console, trusting the test CA."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.tls = ssl.create_default_context(cafile=str(agent.ca))

    def url(self, server_id: str) -> str:
        return f"wss://127.0.0.1:{self.agent.port}/api/v1/servers/{server_id}/console"

    async def open(
        self, session: aiohttp.ClientSession, server_id: str, origin: str | None = PANEL
    ) -> aiohttp.ClientWebSocketResponse:
        headers = {"Origin": origin} if origin else {}
        return await session.ws_connect(self.url(server_id), ssl=self.tls, headers=headers)

    async def authed(
        self, session: aiohttp.ClientSession, server_id: str, **claims: Any
    ) -> tuple[aiohttp.ClientWebSocketResponse, list[dict[str, Any]]]:
        """A socket past its auth, with its first frames: auth success, status, the lines."""
        last = held(self.agent, server_id)[-1:]
        ws = await self.open(session, server_id)
        await send(ws, "auth", token(server_id, **claims))
        first = await frames_until(ws, lambda f: f["event"] == "status")
        if last:
            first += await frames_until(ws, lambda f: f["args"] == last)
        return ws, first


async def send(ws: aiohttp.ClientWebSocketResponse, event: str, *args: Any) -> None:
    await ws.send_str(json.dumps({"event": event, "args": list(args)}))


async def frames_until(ws, condition, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Frames received until one meets `condition` (that one included)."""
    got: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while True:
            message = await ws.receive()
            if message.type != aiohttp.WSMsgType.TEXT:
                raise AssertionError(
                    f"closed ({message.data}) after {[f['event'] for f in got[-3:]]}"
                )
            got.append(json.loads(message.data))
            if condition(got[-1]):
                return got


async def close_code(ws, timeout: float = 10.0) -> int | None:
    """The code of the close frame the agent sent (frames before it are read and dropped)."""
    async with asyncio.timeout(timeout):
        while (message := await ws.receive()).type == aiohttp.WSMsgType.TEXT:
            pass
    return message.data if message.type == aiohttp.WSMsgType.CLOSE else ws.close_code


def lines(frames: list[dict[str, Any]]) -> list[str]:
    return [f["args"][0] for f in frames if f["event"] == "console output"]


def held(agent: Agent, server_id: str) -> list[str]:
    answer = agent.request("GET", f"/v1/servers/{server_id}/console?after=0").json()
    texts = [line["text"] for line in answer["lines"]]
    while len(answer["lines"]) == 200:
        answer = agent.request(
            "GET", f"/v1/servers/{server_id}/console?after={answer['lines'][-1]['n']}"
        ).json()
        texts += [line["text"] for line in answer["lines"]]
    return texts


# Authentication


def refusal(console_agent: Agent, server_id: str, first_token: str | None) -> tuple[list, int]:
    async def scenario() -> tuple[list, int]:
        async with aiohttp.ClientSession() as session:
            ws = await Client(console_agent).open(session, server_id)
            if first_token is not None:
                await send(ws, "auth", first_token)
            frames = await frames_until(ws, lambda f: f["event"] == "jwt error")
            return frames, await close_code(ws)

    return run(scenario())


def test_a_socket_that_does_not_authenticate_within_5_s_is_closed_4401(console_agent, game):
    frames, code = refusal(console_agent, game, None)
    assert frames == [{"event": "jwt error", "args": ["authentication timed out"]}]
    assert code == 4401


def test_pings_do_not_put_off_the_5_s_given_for_auth(console_agent, game):
    async def scenario() -> tuple[list, int | None, bool]:
        async with aiohttp.ClientSession() as session:
            ws = await Client(console_agent).open(session, game)

            async def ping_for_20_s() -> None:
                for _ in range(40):
                    await ws.ping()
                    await asyncio.sleep(0.5)

            pinging = asyncio.create_task(ping_for_20_s())
            frames = await frames_until(ws, lambda f: f["event"] == "jwt error", timeout=30)
            code = await close_code(ws)
            still_pinging = not pinging.done()
            pinging.cancel()
            return frames, code, still_pinging

    frames, code, still_pinging = run(scenario())
    assert frames == [{"event": "jwt error", "args": ["authentication timed out"]}]
    assert (code, still_pinging) == (4401, True)


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"server": "srv_" + "O" * 16}, "token for another server"),
        ({"aud": "node-b"}, "token for another node"),
        ({"exp": int(time.time()) - 10}, "token expired"),
    ],
)
def test_a_token_for_another_server_or_node_or_expired_is_refused_4401(
    console_agent, game, claims, reason
):
    frames, code = refusal(console_agent, game, token(game, **claims))
    assert frames[-1] == {"event": "jwt error", "args": [reason]}
    assert code == 4401


def test_a_token_signed_by_another_key_is_refused(console_agent, game):
    other = jwt.encode(
        jwt.decode(token(game), options={"verify_signature": False}),
        Ed25519PrivateKey.generate(),
        algorithm="EdDSA",
        headers={"kid": KID},
    )
    frames, code = refusal(console_agent, game, other)
    assert (frames[-1]["args"], code) == (["invalid token"], 4401)


def test_a_token_of_a_revoked_key_is_refused(console_agent, game):
    issued = token(game, key_id="Revoked1")
    withdraw(console_agent, reason="key revoked", key_ids=["Revoked1"])
    frames, code = refusal(console_agent, game, issued)
    assert (frames[-1]["args"], code) == (["access withdrawn"], 4401)


def test_a_token_issued_after_the_withdrawal_is_taken(console_agent, game):
    withdraw(console_agent, reason="key revoked", key_ids=["Later001"])
    time.sleep(0.01)  # a token issued after the withdrawal, to the millisecond

    async def scenario() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            _, first = await Client(console_agent).authed(session, game, key_id="Later001")
            return first

    assert run(scenario())[0] == {"event": "auth success", "args": []}


# Origin


def upgrade(console_agent: Agent, server_id: str, origin: str | None) -> int:
    headers = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
    headers["Sec-WebSocket-Key"] = base64.b64encode(secrets.token_bytes(16)).decode()
    if origin is not None:
        headers["Origin"] = origin
    url = f"{console_agent.url}/api/v1/servers/{server_id}/console"
    response = requests.get(url, headers=headers, verify=str(console_agent.ca), timeout=10)
    return response.status_code


def test_an_origin_that_is_not_the_panels_is_refused_403(console_agent, game):
    assert upgrade(console_agent, game, "https://evil.example.test") == 403


def test_the_panels_origin_or_none_may_open_the_socket(console_agent, game):
    assert upgrade(console_agent, game, PANEL) == 101
    assert upgrade(console_agent, game, None) == 101


# What is sent


def test_after_auth_the_status_then_the_last_150_lines_then_live_lines_in_order(
    console_agent, game
):
    # The agent asks the game for its players every heartbeat: a `players` line may come
    # between any two reads, so the last 150 are those held just before or just after auth.
    async def scenario() -> tuple[list, list, list]:
        async with aiohttp.ClientSession() as session:
            before = held(console_agent, game)[-150:]
            ws, first = await Client(console_agent).authed(session, game)
            after = held(console_agent, game)[-150:]
            for n in range(20):
                console_agent.console(game, f"say live {n}")
            live = await frames_until(ws, lambda f: f["args"] == ["[say] live 19"])
            return first, [before, after], live

    first, last_150, live = run(scenario())
    assert first[:2] == [
        {"event": "auth success", "args": []},
        {"event": "status", "args": ["running"]},
    ]
    assert lines(first[2:]) in last_150
    said = [line for line in lines(live) if line.startswith("[say]")]
    assert said == [f"[say] live {n}" for n in range(20)]


def test_stats_come_every_2_s_while_the_game_runs(console_agent, game):
    async def scenario() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            ws, _ = await Client(console_agent).authed(session, game)
            return await frames_until(ws, lambda f: f["event"] == "stats", timeout=5)

    assert set(run(scenario())[-1]["args"][0]) == {
        "memory_mb", "cpu_percent", "players", "uptime_seconds"
    }  # fmt: skip


def test_send_stats_answers_the_games_readings(console_agent, game):
    async def scenario() -> dict[str, Any]:
        async with aiohttp.ClientSession() as session:
            ws, _ = await Client(console_agent).authed(session, game)
            await send(ws, "send stats")
            return (await frames_until(ws, lambda f: f["event"] == "stats"))[-1]

    (stats,) = run(scenario())["args"]
    assert set(stats) == {"memory_mb", "cpu_percent", "players", "uptime_seconds"}
    assert stats["memory_mb"] > 0 and stats["uptime_seconds"] >= 0


def test_auth_again_replaces_the_token_and_sends_nothing_twice(console_agent, game):
    async def scenario() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            ws, _ = await Client(console_agent).authed(session, game)
            await send(ws, "auth", token(game))
            await send(ws, "send stats")
            return await frames_until(ws, lambda f: f["event"] == "stats")

    after = [f["event"] for f in run(scenario()) if f["event"] != "console output"]
    assert after == ["auth success", "stats"]  # no status, no lines again


def test_a_token_near_its_end_is_told_expiring_then_expired_and_closed_4401(console_agent, game):
    async def scenario() -> tuple[list, int]:
        async with aiohttp.ClientSession() as session:
            ws, _ = await Client(console_agent).authed(session, game, exp=int(time.time()) + 3)
            frames = await frames_until(ws, lambda f: f["event"] == "token expired")
            return frames, await close_code(ws)

    frames, code = run(scenario())
    events = [f["event"] for f in frames]
    assert events.index("token expiring") < events.index("token expired")
    assert code == 4401


# Commands


def test_send_command_with_console_write_goes_through_the_control_plane_to_the_game(
    console_agent, game, commands
):
    async def scenario() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            scopes = ("servers:read", "console:write")
            ws, _ = await Client(console_agent).authed(session, game, scopes=scopes)
            await send(ws, "send command", "say over the socket")
            return await frames_until(ws, lambda f: f["args"] == ["[say] over the socket"])

    run(scenario())
    body = commands.bodies[-1]
    assert body["command"] == "say over the socket"
    assert jwt.decode(body["token"], options={"verify_signature": False})["server"] == game


def test_send_command_without_console_write_is_refused_and_reaches_nothing(
    console_agent, game, commands
):
    before = len(commands.bodies)

    async def scenario() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            ws, _ = await Client(console_agent).authed(session, game)
            await send(ws, "send command", "say not allowed")
            return await frames_until(ws, lambda f: f["event"] == "error")

    assert run(scenario())[-1] == {"event": "error", "args": ["insufficient_scope"]}
    assert len(commands.bodies) == before


def test_50_commands_in_a_second_send_10_and_throttle_the_rest(console_agent, game, commands):
    before = len(commands.bodies)

    async def scenario() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            scopes = ("servers:read", "console:write")
            ws, _ = await Client(console_agent).authed(session, game, scopes=scopes)
            for n in range(50):
                await send(ws, "send command", f"say burst {n}")
            return await frames_until(ws, lambda f: f["args"] == ["[say] burst 9"])

    frames = run(scenario())
    assert [f for f in frames if f["event"] == "throttled"] == [
        {"event": "throttled", "args": ["send command"]}
    ] * 40
    assert [b["command"] for b in commands.bodies[before:]] == [f"say burst {n}" for n in range(10)]


# Limits


def test_the_31st_socket_of_a_server_is_closed_4429_after_its_auth(console_agent, game):
    async def scenario() -> int | None:
        async with aiohttp.ClientSession() as session:
            client = Client(console_agent)
            opened = [await client.authed(session, game) for _ in range(30)]
            ws = await client.open(session, game)
            await send(ws, "auth", token(game))
            code = await close_code(ws)
            for socket, _ in opened:
                await socket.close()
            return code

    assert run(scenario()) == 4429


def test_a_frame_of_exactly_4_kib_is_taken(console_agent, game):
    envelope = json.dumps({"event": "send stats", "args": [""]})
    exactly_4_kib = json.dumps({"event": "send stats", "args": ["x" * (4096 - len(envelope))]})
    assert len(exactly_4_kib.encode()) == 4096

    async def scenario() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            ws, _ = await Client(console_agent).authed(session, game)
            await ws.send_str(exactly_4_kib)
            return await frames_until(ws, lambda f: f["event"] == "stats")

    assert run(scenario())[-1]["event"] == "stats"


def test_a_frame_over_4_kib_closes_the_socket_1009(console_agent, game):
    async def scenario() -> int | None:
        async with aiohttp.ClientSession() as session:
            ws, _ = await Client(console_agent).authed(session, game)
            await send(ws, "send stats", "x" * 4096)
            return await close_code(ws)

    assert run(scenario()) == 1009


@pytest.fixture(scope="module")
def shouter(console_agent, module_control_plane) -> str:
    server_id, _ = console_agent.start_server("shouter", server_id=new_server_id())
    module_control_plane.wait_for_report(server_id, "ready")
    return server_id


def small_receive_buffer(address: Any) -> socket.socket:
    family, kind, protocol, _name, _where = address
    sock = socket.socket(family, kind, protocol)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    return sock


def test_a_slow_reader_is_closed_4408_and_a_fast_one_beside_it_misses_nothing(
    console_agent, shouter
):
    count, width = 2500, 1000  # 500 lines a second for 5 s: a reader keeps up, or falls behind

    async def scenario() -> tuple[int | None, list[str]]:
        # The slow reader's kernel buffer is held small: loopback's autotuning could otherwise
        # take in megabytes for it, and nothing would be left waiting on the agent's side.
        slow_connector = aiohttp.TCPConnector(socket_factory=small_receive_buffer)
        async with (
            aiohttp.ClientSession() as session,
            aiohttp.ClientSession(connector=slow_connector) as slow_session,
        ):
            client = Client(console_agent)
            slow, _ = await client.authed(slow_session, shouter)
            fast, _ = await client.authed(session, shouter)
            console_agent.console(shouter, f"shout {count} {width} 500")
            last = f"{count - 1:08d} " + "x" * width
            got = await frames_until(fast, lambda f: f["args"] == [last], timeout=30)
            return await close_code(slow), lines(got)

    code, received = run(scenario())
    assert code == 4408
    assert [line[:8] for line in received] == [f"{n:08d}" for n in range(count)]


def test_a_game_past_2000_lines_a_second_is_cut_with_one_daemon_message(console_agent, shouter):
    async def scenario() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            ws, _ = await Client(console_agent).authed(session, shouter)
            console_agent.console(shouter, "shout 3000 10 100000")
            return await frames_until(ws, lambda f: f["event"] == "daemon message")

    frames = run(scenario())
    assert frames[-1] == {"event": "daemon message", "args": ["output throttled"]}
    assert len(lines(frames)) <= 2000


def test_each_change_of_state_is_sent_as_it_happens(console_agent, shouter):
    async def scenario() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            ws, _ = await Client(console_agent).authed(session, shouter)
            console_agent.request("POST", f"/v1/servers/{shouter}/stop")
            return await frames_until(ws, lambda f: f == {"event": "status", "args": ["stopped"]})

    states = [f["args"][0] for f in run(scenario()) if f["event"] == "status"]
    assert states == ["stopping", "stopped"]


# Withdrawals


def withdraw(agent: Agent, **message: Any) -> None:
    answer = agent.request("POST", "/v1/withdrawals", {"at": time.time(), **message})
    assert answer.status_code == 200, answer.text


def test_a_withdrawal_closes_the_sockets_it_covers_with_4403_and_no_other(console_agent, game):
    async def scenario() -> tuple[int | None, bool]:
        async with aiohttp.ClientSession() as session:
            client = Client(console_agent)
            covered, _ = await client.authed(session, game, key_id="Gone0001")
            other, _ = await client.authed(session, game, key_id="Kept0001")
            withdraw(console_agent, reason="key revoked", key_ids=["Gone0001"])
            code = await close_code(covered, timeout=5)
            await send(other, "send stats")
            await frames_until(other, lambda f: f["event"] == "stats")
            return code, other.closed

    assert run(scenario()) == (4403, False)


def test_a_socket_ends_4403_when_its_key_expires(console_agent, game):
    async def scenario() -> int | None:
        async with aiohttp.ClientSession() as session:
            ws, _ = await Client(console_agent).authed(session, game, key_exp=time.time() + 1)
            return await close_code(ws)

    assert run(scenario()) == 4403


def test_a_withdrawal_in_the_heartbeat_answer_is_taken_and_said_taken(
    console_agent, game, module_control_plane
):
    message = {"id": 7, "reason": "key revoked", "key_ids": ["Beat0001"], "at": time.time()}
    module_control_plane.heartbeat_answer = {
        **module_control_plane.heartbeat_answer,
        "withdrawals": [message],
    }
    wait_until(
        lambda: 7 in module_control_plane.heartbeats[-1].get("withdrawals_taken", []), timeout=25
    )
    module_control_plane.heartbeat_answer["withdrawals"] = []
    issued_before = token(game, key_id="Beat0001", iat=message["at"] - 1)
    frames, code = refusal(console_agent, game, issued_before)
    assert (frames[-1]["args"], code) == (["access withdrawn"], 4401)
