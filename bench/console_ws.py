"""Benchmark: the live console websocket of a real `gshost-agent` under load, against a bare
aiohttp websocket broadcast of the same lines, in the same run.

BENCH servers (default 20) each run a `ticker` game printing RATE lines a second (100), each
line carrying CLOCK_MONOTONIC at its write; SOCKETS websockets (30) per server read them.
Measured for SECONDS (10), for each of the two:

- latency from a line's write in the game to its frame at the client (p50, p99);
- throughput: frames received a second, all sockets together (expected: servers x sockets x
  rate);
- the server process's CPU (the agent's; the bare broadcaster's), in % of one core.

The agent runs its games unsandboxed here (`AGENT_ALLOW_UNSANDBOXED=true AGENT_SANDBOX=off`):
the sockets are measured, not the sandbox. The bare broadcaster reads each game's stdout
itself and sends every line to its sockets, over the same TLS: no tokens, no queues, no
limits. For comparison, the mirror's latency: a poller of the agent's `GET /v1/servers/{id}/
console?after=N` every 1.5 s, as the panel's mirror asks (the control plane's own hop not
included, so the mirror is slower still).

    python bench/console_ws.py            # 20 servers x 30 sockets, 100 lines/s, 10 s
    python bench/console_ws.py --small    # 4 x 10, 5 s: under a minute

Needs root (the agent's data directory and game user), like the other agent benchmarks.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
import jwt
import psutil
import requests
import trustme
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.agent.control_plane import TOKEN, ControlPlane
from tests.agent.lines import free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent
NODE = "bench-node"
KEY = Ed25519PrivateKey.generate()
TICKER = """
import sys, time
print("ready", flush=True)
for command in sys.stdin:
    words = command.split()
    if words and words[0] == "tick":  # tick RATE SECONDS
        rate, seconds = int(words[1]), float(words[2])
        begun, n = time.monotonic(), 0
        while (now := time.monotonic()) - begun < seconds:
            while n < (now - begun) * rate:
                print(f"t {time.monotonic_ns()} {n}", flush=True)
                n += 1
            time.sleep(0.002)
"""
TICKER_TEMPLATE = """
name = "ticker"
command = ["{python}", "-I", "{game_files}/ticker.py"]
files = ["ticker.py"]
ready_pattern = '^ready$'
stop_command = ""
stop_signal = "SIGTERM"
stop_timeout_seconds = 2
"""
MIRROR_SECONDS = 1.5


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


class Tally:
    """What the clients received: latencies (ms) of the lines written after `since`."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.frames = 0
        self.since = 0

    def take(self, text: str) -> None:
        if text.startswith("t "):
            written = int(text.split()[1])
            if written >= self.since:
                self.frames += 1
                self.latencies.append((time.monotonic_ns() - written) / 1e6)


async def read_forever(ws: aiohttp.ClientWebSocketResponse, tally: Tally, event: str) -> None:
    async for message in ws:
        if message.type != aiohttp.WSMsgType.TEXT:
            return
        frame = json.loads(message.data)
        if frame.get("event") == event:
            tally.take(frame["args"][0])


def cpu_seconds(pid: int) -> float:
    process = psutil.Process(pid)
    times = process.cpu_times()
    return times.user + times.system


# The agent --------------------------------------------------------------------------------


def token(server_id: str) -> str:
    now = time.time()
    claims = {
        "aud": NODE,
        "sub": "key:BenchKey",
        "server": server_id,
        "scopes": ["servers:read"],
        "jti": secrets.token_urlsafe(12),
        "iat": now,
        "exp": int(now) + 300,
    }
    return jwt.encode(claims, KEY, algorithm="EdDSA", headers={"kid": "bench"})


def published_key() -> dict[str, str]:
    raw = KEY.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    x = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    return {"kty": "OKP", "crv": "Ed25519", "kid": "bench", "x": x}


class AgentRun:
    def __init__(self, work: Path, servers: int) -> None:
        self.work, self.servers = work, servers
        self.plane = ControlPlane(port=free_port(), token=TOKEN)
        self.plane.heartbeat_answer = {
            "node": NODE,
            "console": {"keys": [published_key()], "origins": []},
        }
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.ids = [f"srv_bench{n:011d}" for n in range(servers)]
        self.process: subprocess.Popen[bytes] | None = None

    def call(self, method: str, path: str, body: Any = None) -> requests.Response:
        return requests.request(
            method,
            self.url + path,
            json=body,
            headers={"Authorization": f"Bearer {TOKEN}"},
            verify=str(self.work / "ca.pem"),
            timeout=20,
        )

    def start(self) -> None:
        self.plane.up()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "AGENT_TOKEN": TOKEN,
            "AGENT_CONTROL_URL": self.plane.url,
            "AGENT_DATA_DIR": str(self.work / "data"),
            "AGENT_BIND": f"127.0.0.1:{self.port}",
            "AGENT_TLS_CERT": str(self.work / "cert.pem"),
            "AGENT_TLS_KEY": str(self.work / "key.pem"),
            "AGENT_GAMES_DIR": str(self.work / "games"),
            "AGENT_ALLOW_UNSANDBOXED": "true",
            "AGENT_SANDBOX": "off",
        }
        (self.work / "data").mkdir(mode=0o711)
        log = (self.work / "agent.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gshost_agent", "--stop-servers-on-exit"],
            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_until(lambda: self.plane.heartbeats, timeout=30)
        for server_id in self.ids:
            body = {"game": "ticker", "port": free_port(), "memory_mb": 256, "settings": {}}
            assert self.call("POST", f"/v1/servers/{server_id}/start", body).status_code == 202
        for server_id in self.ids:
            self.plane.wait_for_report(server_id, "ready", timeout=60)

    def tick(self, index: int, rate: int, seconds: float) -> None:
        command = {"command": f"tick {rate} {seconds}"}
        self.call("POST", f"/v1/servers/{self.ids[index]}/console", command)

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=30)
        self.plane.down()


async def mirror(run: AgentRun, seconds: float) -> list[float]:
    """What the mirror would see of server 0: polled every 1.5 s."""
    latencies: list[float] = []
    after = run.call("GET", f"/v1/servers/{run.ids[0]}/console").json()["last"]
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        await asyncio.sleep(MIRROR_SECONDS)
        answer = await asyncio.to_thread(
            run.call, "GET", f"/v1/servers/{run.ids[0]}/console?after={after}"
        )
        page = answer.json()
        now = time.monotonic_ns()
        for line in page["lines"]:
            if line["text"].startswith("t "):
                latencies.append((now - int(line["text"].split()[1])) / 1e6)
        after = page["last"]
    return latencies


async def measure(
    urls: list[str],
    sockets: int,
    tls: ssl.SSLContext,
    first: Any,
    event: str,
    go: Any,
    seconds: float,
    pid: int,
    side: Any = None,
) -> dict[str, Any]:
    tally = Tally()
    # limit=0: a socket holds its connection, and the default pool of 100 would hold the rest back
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        opened = []
        for index, url in enumerate(urls):
            for _ in range(sockets):
                ws = await session.ws_connect(url, ssl=tls, max_msg_size=0)
                await first(ws, index)
                opened.append(ws)
        readers = [asyncio.ensure_future(read_forever(ws, tally, event)) for ws in opened]
        await asyncio.sleep(1.0)  # the backlog of each socket read and done with
        tally.since = time.monotonic_ns()
        cpu_before, began = cpu_seconds(pid), time.monotonic()
        for index in range(len(urls)):
            go(index)
        extra = asyncio.ensure_future(side(seconds)) if side else None
        await asyncio.sleep(seconds + 0.5)
        cpu = cpu_seconds(pid) - cpu_before
        wall = time.monotonic() - began
        for ws in opened:
            await ws.close()
        for reader in readers:
            reader.cancel()
        mirrored = await extra if extra is not None else []
    return {
        "p50": percentile(tally.latencies, 0.5),
        "p99": percentile(tally.latencies, 0.99),
        "frames_per_s": tally.frames / seconds,
        "cpu_percent": 100 * cpu / wall,
        "mirror_p50": percentile(mirrored, 0.5),
        "mirror_p99": percentile(mirrored, 0.99),
    }


async def bench_agent(work: Path, servers: int, sockets: int, rate: int, seconds: float) -> dict:
    run = AgentRun(work, servers)
    run.start()
    try:
        tls = ssl.create_default_context(cafile=str(work / "ca.pem"))
        urls = [f"wss://127.0.0.1:{run.port}/api/v1/servers/{sid}/console" for sid in run.ids]

        async def first(ws: aiohttp.ClientWebSocketResponse, index: int) -> None:
            await ws.send_str(json.dumps({"event": "auth", "args": [token(run.ids[index])]}))
            async for message in ws:
                if json.loads(message.data)["event"] == "status":
                    return

        assert run.process is not None
        return await measure(
            urls, sockets, tls, first, "console output",
            lambda index: run.tick(index, rate, seconds), seconds, run.process.pid,
            side=lambda s: mirror(run, s),
        )  # fmt: skip
    finally:
        run.stop()


# The bare broadcast -----------------------------------------------------------------------


def bare_main(port: int, servers: int, work: Path) -> None:
    """A bare aiohttp broadcaster: each game's stdout, line by line, to its sockets."""

    async def serve() -> None:
        game = [sys.executable, "-I", str(work / "games" / "ticker.py")]
        pipe = subprocess.PIPE
        games = [
            await asyncio.create_subprocess_exec(*game, stdin=pipe, stdout=pipe)
            for _ in range(servers)
        ]
        members: list[set[web.WebSocketResponse]] = [set() for _ in range(servers)]

        async def pump(index: int) -> None:
            stdout = games[index].stdout
            assert stdout is not None
            async for raw in stdout:
                text = json.dumps({"event": "line", "args": [raw.decode().rstrip("\n")]})
                for ws in list(members[index]):
                    await ws.send_str(text)

        async def socket(request: web.Request) -> web.WebSocketResponse:
            index = int(request.match_info["index"])
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            members[index].add(ws)
            async for _ in ws:
                pass
            members[index].discard(ws)
            return ws

        async def tick(request: web.Request) -> web.Response:
            body = await request.json()
            stdin = games[int(body["index"])].stdin
            assert stdin is not None
            stdin.write(f"tick {body['rate']} {body['seconds']}\n".encode())
            return web.json_response({})

        pumps = [asyncio.ensure_future(pump(index)) for index in range(servers)]
        app = web.Application()
        app.add_routes([web.get("/{index}", socket), web.post("/tick", tick)])
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(work / "cert.pem", work / "key.pem")
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls).start()
        print("listening", flush=True)
        await asyncio.gather(*pumps)

    asyncio.run(serve())


async def bench_bare(work: Path, servers: int, sockets: int, rate: int, seconds: float) -> dict:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, __file__, "--bare", str(port), str(servers), str(work)],
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == b"listening"
        tls = ssl.create_default_context(cafile=str(work / "ca.pem"))
        urls = [f"wss://127.0.0.1:{port}/{index}" for index in range(servers)]

        def go(index: int) -> None:
            body = {"index": index, "rate": rate, "seconds": seconds}
            requests.post(f"https://127.0.0.1:{port}/tick", json=body, verify=str(work / "ca.pem"))

        async def first(ws: aiohttp.ClientWebSocketResponse, index: int) -> None:
            return None

        return await measure(urls, sockets, tls, first, "line", go, seconds, process.pid)
    finally:
        for child in psutil.Process(process.pid).children(recursive=True):
            child.kill()
        process.kill()
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="4 servers x 10 sockets, 5 s")
    parser.add_argument("--bare", nargs=3, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.bare:
        port, servers, work = arguments.bare
        bare_main(int(port), int(servers), Path(work))
        return
    servers = int(os.environ.get("BENCH_SERVERS", "4" if arguments.small else "20"))
    sockets = int(os.environ.get("BENCH_SOCKETS", "10" if arguments.small else "30"))
    rate = int(os.environ.get("BENCH_RATE", "100"))
    seconds = float(os.environ.get("BENCH_SECONDS", "5" if arguments.small else "10"))
    work = Path(tempfile.mkdtemp(prefix="gshost-bench-console-", dir="/tmp"))
    os.chmod(work, 0o711)
    try:
        authority = trustme.CA()
        issued = authority.issue_cert("127.0.0.1")
        authority.cert_pem.write_to_path(str(work / "ca.pem"))
        issued.cert_chain_pems[0].write_to_path(str(work / "cert.pem"))
        issued.private_key_pem.write_to_path(str(work / "key.pem"))
        (work / "games").mkdir()
        (work / "games" / "ticker.toml").write_text(TICKER_TEMPLATE)
        (work / "games" / "ticker.py").write_text(TICKER)
        os.chmod(work / "games", 0o755)
        expected = servers * sockets * rate
        print(f"{servers} servers x {sockets} sockets, {rate} lines/s each, {seconds:.0f} s")
        print(f"expected {expected} frames/s")
        agent = asyncio.run(bench_agent(work, servers, sockets, rate, seconds))
        bare = asyncio.run(bench_bare(work, servers, sockets, rate, seconds))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'':24}{'p50 ms':>9}{'p99 ms':>9}{'frames/s':>11}{'CPU %':>8}")
    for name, row in (("agent websocket", agent), ("bare aiohttp broadcast", bare)):
        print(
            f"{name:24}{row['p50']:9.1f}{row['p99']:9.1f}{row['frames_per_s']:11.0f}"
            f"{row['cpu_percent']:8.0f}"
        )
    print(f"{'mirror (agent poll 1.5 s)':24}{agent['mirror_p50']:9.0f}{agent['mirror_p99']:9.0f}")
    print(
        f"throughput agent / bare: {agent['frames_per_s'] / bare['frames_per_s']:.2f} "
        f"(goal >= 0.8); agent p99 {agent['p99']:.1f} ms (goal <= 50)"
    )


if __name__ == "__main__":
    main()
