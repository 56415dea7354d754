"""Benchmark: events from real game processes, through the whole chain.

The control plane served by gunicorn (the shipped gunicorn.conf.py) on PostgreSQL + Redis,
the real `qcluster`, the local HTTPS receiver of bench/delivery_rig.py in its own process, and
a real `gshost-agent` registered as a node (its reports go to that gunicorn), running demo
games as the unprivileged game user. Measured, each against a baseline taken in the same run:

1. game exit -> first delivery attempt of `server.crashed`: the clock starts just before this
   process sends SIGKILL to the game and stops when the receiver takes the request (both
   CLOCK_MONOTONIC). Baseline: the same event from a server of the simulated node
   (`host_crash`, what `simulate SERVER_ID crash` does there): the control plane's own
   event -> first attempt, without agent, keeper or report. Interleaved, one of each a round.
2. ready line -> first attempt of `server.started`: the clock starts when the keeper writes
   the game's ready line to its console log (inotify on the run directory), after a power
   start through the API.
3. `GET /servers/{id}/realtime-stats` through the API (HTTP keep-alive, one connection)
   against the agent's own `GET /v1/servers/{id}/stats` (HTTPS keep-alive): the control
   plane's share. Interleaved in rounds.

    python bench/agent_events.py        # BENCH_CRASHES (default 60), BENCH_STATS_CALLS (600)

Needs root (the agent runs games as its game user), PostgreSQL and Redis
(scripts/ensure-services.sh).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import requests
import trustme

from bench.deliveries import resolve_bench_names_to_loopback
from bench.delivery_rig import (
    DOMAIN,
    ENV,
    PYTHON,
    ROOT,
    Receiver,
    prepare_database,
    setup_django,
    start_worker,
)
from bench.web_rig import gunicorn_start
from tests.processes import unmount_under

CRASHES = int(os.environ.get("BENCH_CRASHES", "60"))
STATS_CALLS = int(os.environ.get("BENCH_STATS_CALLS", "600"))
STATS_ROUND = 50
EVENT_TIMEOUT = 30.0
READY_LINE = re.compile(rb"^ready on port \d+$", re.MULTILINE)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000

    return {"p50": at(0.5), "p95": at(0.95), "p99": at(0.99), "max": ordered[-1] * 1000}


def line(what: str, values: list[float]) -> str:
    p = percentiles(values)
    return (
        f"  {what:<46} n={len(values):<4} p50 {p['p50']:7.1f} ms  p95 {p['p95']:7.1f} ms  "
        f"p99 {p['p99']:7.1f} ms  max {p['max']:7.1f} ms"
    )


class ReadyLines:
    """When the keeper of each watched server writes a ready line to its console log (inotify
    on the server's run directory: the keeper appends and flushes each line as it reads it,
    before anyone else hears of it)."""

    IN_MODIFY, IN_CREATE = 0x2, 0x100

    def __init__(self) -> None:
        self._libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self._fd = self._libc.inotify_init1(0)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._watched: dict[int, tuple[str, Path]] = {}
        self._seen: dict[str, int] = {}  # ready lines in the server's current console log
        self.stamps: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()

    def watch(self, server_id: str, run_dir: Path) -> None:
        log = run_dir / "console.log"
        mask = self.IN_MODIFY | self.IN_CREATE
        with self._lock:
            self._seen[server_id] = len(READY_LINE.findall(log.read_bytes()))
            self.stamps[server_id] = []
            wd = self._libc.inotify_add_watch(self._fd, str(run_dir).encode(), mask)
            self._watched[wd] = (server_id, log)

    def _run(self) -> None:
        while True:
            data = os.read(self._fd, 65536)
            now = time.monotonic()
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = struct.unpack_from("iIII", data, offset)
                name = data[offset + 16 : offset + 16 + length].rstrip(b"\0")
                offset += 16 + length
                if name != b"console.log" or wd not in self._watched:
                    continue
                server_id, log = self._watched[wd]
                with self._lock:
                    if mask & self.IN_CREATE:  # each start begins a new console log
                        self._seen[server_id] = 0
                    with contextlib.suppress(FileNotFoundError):  # gone: the next start's
                        self._read(server_id, log, now)

    def _read(self, server_id: str, log: Path, now: float) -> None:
        # The whole log each time: a few lines a run, and no offset to go wrong when a new
        # file takes the old one's place (and maybe its inode number).
        found = len(READY_LINE.findall(log.read_bytes()))
        if found > self._seen[server_id]:
            self._seen[server_id] = found
            self.stamps[server_id].append(now)


class Chain:
    """Receiver, worker, web service and agent, and the bench's own view of the database."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.receiver = Receiver([])
        setup_django()
        resolve_bench_names_to_loopback()
        self.worker = start_worker(self.receiver.ca_pem_path)
        self.web_port = free_port()
        try:
            self.web = self._start_web()
        except BaseException:
            os.killpg(self.worker.pid, signal.SIGKILL)
            self.worker.wait()
            self.receiver.stop()
            raise
        self.agent: subprocess.Popen[bytes] | None = None
        self.used: set[str] = set()  # delivery ids already matched
        self.row_seen = 0.0

    def _start_web(self) -> subprocess.Popen[bytes]:
        (self.work / "metrics").mkdir()
        env = {
            **ENV,
            "WEBHOOK_CA_BUNDLE": self.receiver.ca_pem_path,
            "PROMETHEUS_MULTIPROC_DIR": str(self.work / "metrics"),
            "API_RATE_DEFAULT": "100000000/min",
            "API_RATE_REALTIME": "100000000/min",  # every call measured, none answered 429
        }
        return gunicorn_start(self.web_port, access_log=self.work / "access.log", env=env)

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def start_agent(self, token: str, agent_port: int) -> None:
        data = self.work / "agent"
        data.mkdir()
        env = {
            "PATH": os.environ["PATH"],
            "AGENT_TOKEN": token,
            "AGENT_CONTROL_URL": self.web_url,
            "AGENT_DATA_DIR": str(data),
            "AGENT_BIND": f"127.0.0.1:{agent_port}",
            "AGENT_TLS_CERT": str(self.work / "cert.pem"),
            "AGENT_TLS_KEY": str(self.work / "key.pem"),
        }
        with (self.work / "agent.log").open("wb") as log:
            self.agent = subprocess.Popen(
                [str(PYTHON), "-m", "gshost_agent", "--stop-servers-on-exit"],
                cwd=ROOT, env=env, stderr=log,
            )  # fmt: skip

    def took(self, method: str, path: str) -> list[float]:
        """How long the web service took over each request to `path` (its access log)."""
        taken = []
        for entry in (self.work / "access.log").read_text().splitlines():
            fields = entry.split()
            if len(fields) == 4 and fields[0] == method and fields[1].endswith(path):
                taken.append(int(fields[3]) / 1e6)
        return taken

    def report_retries(self) -> list[str]:
        """The agent's log lines about a report it had to send again (0.5 s later at least)."""
        text = (self.work / "agent.log").read_text(errors="replace")
        return [line for line in text.splitlines() if "will retry" in line]

    def arrival(self, server_id: str, event: str) -> float:
        """When the receiver took the first attempt of the next `event` of `server_id`;
        `row_seen`: when this process first saw its delivery row (the event committed, so the
        report applied), polling every 5 ms."""
        from webhooks.models import Delivery

        deadline = time.monotonic() + EVENT_TIMEOUT
        self.row_seen = 0.0
        while time.monotonic() < deadline:
            ids = Delivery.objects.filter(server_id=server_id, event=event).values_list(
                "id", flat=True
            )
            fresh = [i for i in ids if i not in self.used]
            if fresh:
                self.row_seen = self.row_seen or time.monotonic()
                self.receiver.drain()
                if fresh[0] in self.receiver.seen:
                    self.used.add(fresh[0])
                    return self.receiver.seen[fresh[0]]
            time.sleep(0.005)
        raise SystemExit(f"no {event} of {server_id} within {EVENT_TIMEOUT} s")

    def stop(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGINT)  # --stop-servers-on-exit: games too
            self.agent.wait(timeout=30)
        for process in (self.worker, self.web):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self.receiver.stop()


def certificates(work: Path) -> str:
    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(work / "ca.pem"))
    issued = authority.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(str(work / "cert.pem"))
    issued.private_key_pem.write_to_path(str(work / "key.pem"))
    return (work / "ca.pem").read_text()


def world(chain: Chain, ca_pem: str, agent_port: int) -> dict[str, Any]:
    from accounts.services import api_key_create, member_add, organization_create
    from audit.actors import Actor
    from audit.services import PanelContext
    from servers.fleet.nodes import NodeInput, node_create
    from servers.services import server_create
    from webhooks.services import webhook_create

    organization = organization_create(slug="bench-agent", name="Bench")
    owner = member_add(
        organization=organization, email="bench@example.com", password=None, owner=True
    )
    key = api_key_create(
        membership=owner, name="bench", scopes=["servers:power", "servers:read"],
        actor=Actor.person(PanelContext(user_email="bench@example.com")),
    ).full_key  # fmt: skip
    webhook_create(
        organization=organization,
        url=f"https://agent-events.{DOMAIN}:{chain.receiver.port}/events",
        events=["server.crashed", "server.started"],
        actor=Actor.system("bench"),
    )
    first = free_port()
    created = node_create(
        data=NodeInput(
            name="bench-node", url=f"https://127.0.0.1:{agent_port}", address="127.0.0.1",
            ports=f"{first}-{first}", ca_pem=ca_pem,
        )
    )  # fmt: skip
    return {
        "key": key,
        "token": created.token,
        "node": created.node,
        "game": server_create(
            actor=Actor.system("bench"), organization=organization, name="Real", node=created.node
        ),
        "simulated": server_create(
            actor=Actor.system("bench"), organization=organization, name="Simulated", game="custom"
        ),
    }


def main() -> None:
    if os.geteuid() != 0:
        raise SystemExit("run as root: the agent runs its games as the game user")
    prepare_database()
    work = Path(tempfile.mkdtemp(prefix="gshost-bench-events-", dir="/tmp"))
    os.chmod(work, 0o711)
    chain: Chain | None = None
    try:
        ca_pem = certificates(work)
        chain = Chain(work)
        run(chain, ca_pem)
    finally:
        if chain is not None:
            chain.stop()
        unmount_under(work)  # the servers' filesystems of agents it killed
        shutil.rmtree(work, ignore_errors=True)


def run(chain: Chain, ca_pem: str) -> None:
    from servers.models import Node, Server
    from servers.simulated.host import host_crash

    agent_port = free_port()
    made = world(chain, ca_pem, agent_port)
    game, simulated = made["game"], made["simulated"]
    chain.start_agent(made["token"], agent_port)
    deadline = time.monotonic() + 30
    while Node.objects.get(id=made["node"].id).last_heartbeat_at is None:
        if time.monotonic() > deadline:
            raise SystemExit("the agent sent no heartbeat")
        time.sleep(0.05)
    api = requests.Session()
    api.trust_env = False
    api.headers["Authorization"] = f"Bearer {made['key']}"
    base = f"{chain.web_url}/api/public/v1/servers"
    run_dir = chain.work / "agent" / "run" / game.id

    def power_start() -> None:
        answer = api.post(f"{base}/{game.id}/power", json={"action": "start"}, timeout=30)
        if answer.status_code != 202:
            raise SystemExit(f"power start: {answer.status_code} {answer.text}")

    def game_pid() -> int:
        return int(json.loads((run_dir / "game.json").read_text())["pid"])

    power_start()  # warm-up: the run directory, connections, the worker's first attempt
    chain.arrival(game.id, "server.started")
    os.kill(game_pid(), signal.SIGKILL)
    chain.arrival(game.id, "server.crashed")
    ready = ReadyLines()
    ready.watch(game.id, run_dir)

    started: list[float] = []
    exits: list[float] = []
    applied: list[float] = []
    early = 0  # rounds whose ready line came before the power start was answered
    recorded: list[float] = []  # the keeper's exit record written (its mtime)
    simulated_crashes: list[float] = []
    for _ in range(CRASHES):
        lines_before = len(ready.stamps[game.id])
        power_start()
        answered = time.monotonic()
        arrived = chain.arrival(game.id, "server.started")
        if len(ready.stamps[game.id]) != lines_before + 1:
            raise SystemExit("the ready line of this start was not seen in the console log")
        ready_at = ready.stamps[game.id][-1]
        if ready_at < answered:
            early += 1  # its report waited for the start's transaction (the server's row lock)
        started.append(arrived - ready_at)
        pid = game_pid()
        killed, killed_wall = time.monotonic(), time.time()
        os.kill(pid, signal.SIGKILL)
        exits.append(chain.arrival(game.id, "server.crashed") - killed)
        applied.append(chain.row_seen - killed)
        recorded.append((run_dir / "exit.json").stat().st_mtime - killed_wall)

        Server.objects.filter(id=simulated.id).update(state="running")
        crashed = time.monotonic()
        host_crash(server_id=simulated.id, exit_code=1)
        simulated_crashes.append(chain.arrival(simulated.id, "server.crashed") - crashed)

    power_start()
    chain.arrival(game.id, "server.started")
    through_api, direct = stats(api, f"{base}/{game.id}/realtime-stats", made, agent_port, chain)

    print(f"\nAgent node events, {CRASHES} rounds (a real demo game, SIGKILLed each round)")
    print(line("(a) game exit -> server.crashed attempt", exits))
    print(line("    exit -> the keeper's exit record written", recorded))
    print(line("    exit -> report applied (delivery row seen)", applied))
    print(line("    the web service applying a report", chain.took("POST", "/reports")))
    print(line("(b) simulated crash -> server.crashed attempt", simulated_crashes))
    print(line("(c) ready line -> server.started attempt", started))
    print(line("    the web service answering a power start", chain.took("POST", "/power")))
    print(f"      rounds whose ready line came before that answer: {early} of {CRASHES}")
    a, b = percentiles(exits), percentiles(simulated_crashes)
    print(
        f"  (a) against its baseline (b): p50 x{a['p50'] / b['p50']:.2f} "
        f"(+{a['p50'] - b['p50']:.0f} ms), p99 x{a['p99'] / b['p99']:.2f}"
    )
    print(f"\nRealtime stats, {STATS_CALLS} calls each, interleaved in rounds of {STATS_ROUND}")
    print(line("(d) GET /servers/{id}/realtime-stats (API)", through_api))
    print(line("(e) GET /v1/servers/{id}/stats (the agent)", direct))
    d, e = percentiles(through_api), percentiles(direct)
    print(
        f"  (d) against its baseline (e): p50 x{d['p50'] / e['p50']:.2f} "
        f"(+{d['p50'] - e['p50']:.1f} ms), p95 x{d['p95'] / e['p95']:.2f}"
    )
    retries = chain.report_retries()
    print(f"\nReports the agent had to send again: {len(retries)}")
    for retry in retries[:5]:
        print(f"  {retry}")
    missed = []
    if a["p50"] >= 250 or a["p99"] >= 1000:
        missed.append("exit -> server.crashed (p50 < 250 ms, p99 < 1 s)")
    if d["p95"] >= 50:
        missed.append("realtime-stats p95 < 50 ms")
    print("\n" + ("MISSED: " + "; ".join(missed) if missed else "All targets met."))


def stats(
    api: requests.Session, url: str, made: dict[str, Any], agent_port: int, chain: Chain
) -> tuple[list[float], list[float]]:
    agent = requests.Session()
    agent.trust_env = False
    agent.verify = str(chain.work / "ca.pem")
    agent.headers["Authorization"] = f"Bearer {made['token']}"
    agent_url = f"https://127.0.0.1:{agent_port}/v1/servers/{made['game'].id}/stats"

    def timed(session: requests.Session, target: str) -> float:
        began = time.perf_counter()
        answer = session.get(target, timeout=30)
        took = time.perf_counter() - began
        if answer.status_code != 200:
            raise SystemExit(f"{target}: {answer.status_code} {answer.text}")
        return took

    for _ in range(20):  # warm-up: connections, the workers' caches
        timed(api, url)
        timed(agent, agent_url)
    through_api: list[float] = []
    direct: list[float] = []
    while len(through_api) < STATS_CALLS:
        through_api += [timed(api, url) for _ in range(STATS_ROUND)]
        direct += [timed(agent, agent_url) for _ in range(STATS_ROUND)]
    return through_api, direct


if __name__ == "__main__":
    main()
