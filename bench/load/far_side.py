"""Everything the load test needs outside the control plane, in one asyncio process:

- the fleet's agents (HTTPS): the readings the control plane asks for (`players`, `stats`);
- the fleet's nodes: a heartbeat from each every 10 s, and reports of crashes and starts at a
  steady rate, with a burst now and then (a node rebooting: its 40 servers crash and start
  again within one second), each node's reports in sequence as its outbox sends them;
- the customers' webhook receiver (HTTPS, `/hook/...`), answering 200 at once.

    python bench/load/far_side.py CONFIG.json

CONFIG names the addresses, the certificate, the nodes (token, servers) and the rates. It
writes `{"ready": true}` to stdout when listening, and on SIGTERM prints its counts as JSON.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import ssl
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

AGENT_VERSION = "bench-load-standin"
HEARTBEAT_SECONDS = 10.0


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Node:
    token: str
    servers: list[str]
    states: dict[str, str] = field(default_factory=dict)
    outbox_id: str = field(default_factory=lambda: "obx_" + uuid.uuid4().hex[:24])
    seq: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self.states = dict.fromkeys(self.servers, "running")


@dataclass
class Counts:
    heartbeats: int = 0
    reports: int = 0
    report_retries: int = 0
    crashes: int = 0
    starts: int = 0
    bursts: int = 0
    deliveries: int = 0
    readings: int = 0
    delivery_ids: set[str] = field(default_factory=set)
    statuses: dict[int, int] = field(default_factory=dict)  # of heartbeats and reports

    def summary(self) -> dict[str, Any]:
        return {
            "heartbeats": self.heartbeats,
            "reports": self.reports,
            "report_retries": self.report_retries,
            "crashes": self.crashes,
            "starts": self.starts,
            "bursts": self.bursts,
            "deliveries": self.deliveries,
            "distinct_deliveries": len(self.delivery_ids),
            "readings": self.readings,
            "statuses": self.statuses,
        }


class FarSide:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.control = config["control_url"]
        self.nodes = [Node(n["token"], n["servers"]) for n in config["nodes"]]
        self.counts = Counts()
        self.events_running = asyncio.Event()
        self.session: ClientSession | None = None

    # --- the agents' readings and the webhook receiver --------------------------------------

    async def players(self, request: web.Request) -> web.Response:
        self.counts.readings += 1
        joined = now_text()
        players = [{"name": "alex", "joined_at": joined}, {"name": "sam", "joined_at": joined}]
        return web.json_response({"count": 2, "max": 20, "players": players})

    async def stats(self, request: web.Request) -> web.Response:
        self.counts.readings += 1
        return web.json_response(
            {
                "state": "running",
                "sampled_at": now_text(),
                "cpu_percent": 12.5,
                "memory_mb": 512,
                "memory_limit_mb": 1024,
                "disk_mb": 800,
                "network_in_kbps": None,
                "network_out_kbps": None,
                "players_online": 2,
                "uptime_seconds": 3600,
            }
        )

    async def hook(self, request: web.Request) -> web.Response:
        await request.read()
        self.counts.deliveries += 1
        self.counts.delivery_ids.add(request.headers.get("webhook-id", ""))
        return web.Response(text="ok")

    # --- the nodes' side of the protocol ----------------------------------------------------

    async def post(self, node: Node, route: str, body: dict[str, Any]) -> None:
        """Retried until 200, as the agent's outbox does (0.5 s, doubling, at most 5 s)."""
        assert self.session is not None
        delay = 0.5
        while True:
            try:
                async with self.session.post(
                    f"{self.control}/internal/nodes/{route}",
                    json=body,
                    headers={"Authorization": f"Bearer {node.token}"},
                ) as response:
                    await response.read()
                    self.counts.statuses[response.status] = (
                        self.counts.statuses.get(response.status, 0) + 1
                    )
                    if response.status in (200, 400, 403):  # the agent drops a 400 or 403
                        return
            except (TimeoutError, OSError, Exception):
                pass
            self.counts.report_retries += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def report(self, node: Node, server_id: str, kind: str) -> None:
        async with node.lock:  # one outbox per node: in sequence
            node.seq += 1
            body = {
                "outbox_id": node.outbox_id,
                "seq": node.seq,
                "server_id": server_id,
                "kind": kind,
                "at": now_text(),
                "pid": 4242 if kind == "ready" else None,
                "exit_code": 1 if kind == "crashed" else None,
                "signal": None,
                "oom": False,
                "last_output": ["[load] it fell over"] if kind == "crashed" else [],
            }
            await self.post(node, "reports", body)
            self.counts.reports += 1

    async def crash(self, node: Node, server_id: str) -> None:
        node.states[server_id] = "stopped"
        await self.report(node, server_id, "crashed")
        self.counts.crashes += 1

    async def start(self, node: Node, server_id: str) -> None:
        node.states[server_id] = "starting"
        await self.report(node, server_id, "started_by_node")
        await self.report(node, server_id, "ready")
        node.states[server_id] = "running"
        self.counts.starts += 1

    async def heartbeats(self, node: Node) -> None:
        await asyncio.sleep(random.uniform(0, HEARTBEAT_SECONDS))
        while True:
            body = {"agent_version": AGENT_VERSION, "outbox_id": node.outbox_id}
            body["servers"] = dict(node.states)
            await self.post(node, "heartbeat", body)
            self.counts.heartbeats += 1
            await asyncio.sleep(HEARTBEAT_SECONDS)

    async def steady_events(self) -> None:
        """`events_per_second` crashes and as many starts of crashed servers, spread evenly."""
        await self.events_running.wait()
        rate = float(self.config["events_per_second"])
        crashed: list[tuple[Node, str]] = []
        tasks: set[asyncio.Task[None]] = set()
        while True:
            node = random.choice(self.nodes)
            running = [s for s, state in node.states.items() if state == "running"]
            if running and not node.lock.locked():
                server = random.choice(running)
                crashed.append((node, server))
                self._spawn(tasks, self.crash(node, server))
            if len(crashed) > 10:  # a crashed server comes back a few seconds later
                self._spawn(tasks, self.start(*crashed.pop(0)))
            await asyncio.sleep(1.0 / rate)

    async def bursts(self) -> None:
        """Every `burst_every_seconds`, a node reboots: its servers crash and start again."""
        await self.events_running.wait()
        every = float(self.config["burst_every_seconds"])
        while True:
            await asyncio.sleep(every)
            node = random.choice(self.nodes)
            servers = [s for s, state in node.states.items() if state == "running"]
            await asyncio.gather(*(self.crash(node, s) for s in servers))
            await asyncio.gather(*(self.start(node, s) for s in servers))
            self.counts.bursts += 1

    @staticmethod
    def _spawn(tasks: set[asyncio.Task[None]], work: Any) -> None:
        task = asyncio.ensure_future(work)
        tasks.add(task)
        task.add_done_callback(tasks.discard)


async def serve(config: dict[str, Any]) -> None:
    far = FarSide(config)
    app = web.Application()
    app.router.add_get("/v1/servers/{id}/players", far.players)
    app.router.add_get("/v1/servers/{id}/stats", far.stats)
    app.router.add_post("/hook/{org}", far.hook)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(config["cert_file"], config["key_file"])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, config["bind"], config["port"], ssl_context=context).start()
    timeout = ClientTimeout(total=30)
    far.session = ClientSession(timeout=timeout, connector=TCPConnector(limit=64))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, far.events_running.set)  # events start on cue
    workers = [asyncio.ensure_future(far.heartbeats(node)) for node in far.nodes]
    workers += [asyncio.ensure_future(far.steady_events()), asyncio.ensure_future(far.bursts())]
    print(json.dumps({"ready": True}), flush=True)
    started = time.monotonic()
    await stop.wait()
    for worker in workers:
        worker.cancel()
    await far.session.close()
    await runner.cleanup()
    print(json.dumps({**far.counts.summary(), "seconds": time.monotonic() - started}), flush=True)


if __name__ == "__main__":
    with open(sys.argv[1]) as config_file:
        asyncio.run(serve(json.load(config_file)))
