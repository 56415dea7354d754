"""Benchmark: a fleet of nodes talking to the control plane through the node protocol.

The control plane served by gunicorn (the shipped gunicorn.conf.py) on PostgreSQL + Redis;
a stand-in for the agents in this process speaks their protocol: each node sends a heartbeat
every 10 s listing its servers with their readings (spread evenly over the 10 s; the first
after each whole minute carries each server's completed minute, as an agent's does), and reports
what its games do (`crashed`, `started_by_node`, `ready`, in turn per server; one report per
node every BENCH_REPORT_EVERY seconds). Five phases of BENCH_SECONDS each, in the same run:

1. baseline: one node with BENCH_SERVERS servers, heartbeats and reports;
2. the floor: `GET /healthz` (a bare view) at the fleet's heartbeat rate, the same driver;
3. BENCH_NODES nodes x BENCH_SERVERS servers at rest: heartbeats only, after BENCH_WARMUP
   seconds of them unmeasured (each web process has met each node once, as it has a few
   minutes after it starts), first without the servers' minutes (their same-run baseline),
   then with them (the first heartbeat after each minute carries each server's);
4. the same with reports.

Each phase prints the handling time of heartbeats and reports as gunicorn measured it (its
access log: request read to response written), p50 and p99, and the web processes' CPU as a
share of one core (the gunicorn process group, from /proc).

    python bench/fleet.py      # BENCH_NODES (500), BENCH_SERVERS (40), BENCH_SECONDS (60),
                               # BENCH_REPORT_EVERY (10), BENCH_WARMUP (30)

Needs PostgreSQL and Redis (scripts/ensure-services.sh).
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("BENCH_DB_NAME", "gshost_bench_fleet")
os.environ.setdefault("BENCH_REDIS_DB", "3")

import requests

from bench.delivery_rig import ENV, prepare_database, setup_django
from bench.web_rig import gunicorn_start, gunicorn_stop
from tests.processes import unmount_under

NODES = int(os.environ.get("BENCH_NODES", "500"))
SERVERS = int(os.environ.get("BENCH_SERVERS", "40"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "60"))
REPORT_EVERY = float(os.environ.get("BENCH_REPORT_EVERY", "10"))
WARMUP = float(os.environ.get("BENCH_WARMUP", "30"))
HEARTBEAT_SECONDS = 10.0
CYCLE = ("crashed", "started_by_node", "ready")  # a running server's reports, in turn
SETTINGS = {"motd": "A gshost demo server", "max-players": "20", "difficulty": "normal"}


@dataclass
class StandInNode:
    name: str
    token: str
    servers: list[str]
    outbox_id: str
    seq: int = 0
    states: dict[str, str] = field(default_factory=dict)  # what the agent says it runs
    next_report: itertools.count[int] = field(default_factory=itertools.count)
    minutes_until: float = 0.0  # the end of the minutes the control plane acknowledged
    sending_until: float = 0.0
    sends_minutes: bool = True  # off: what its minutes cost, measured against it

    def heartbeat(self) -> dict[str, object]:
        """As the agent sends it: its servers' states, its games and machine, and each
        server's readings (the settings file; stats and players while it is not stopped;
        the completed minute, until a heartbeat carrying it is answered 200)."""
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        self.sending_until = time.time() // 60 * 60  # the start of the minute under way
        minutes: list[dict[str, object]] = []
        if self.sends_minutes and self.minutes_until < self.sending_until:
            completed = datetime.fromtimestamp(self.sending_until - 60, UTC)
            minutes = [{"at": completed.strftime("%Y-%m-%dT%H:%M:%SZ"), "cpu_percent": 1.5,
                        "memory_mb": 180.2, "players_online": 2}]  # fmt: skip
        readings: dict[str, object] = {}
        for server, state in self.states.items():
            reading: dict[str, object] = {"settings": SETTINGS}
            if minutes:
                reading["minutes"] = minutes
            if state != "stopped":
                reading |= {
                    "sampled_at": now, "cpu_percent": 1.5, "memory_mb": 180,
                    "memory_limit_mb": 1024, "disk_mb": 12, "network_in_kbps": None,
                    "network_out_kbps": None, "players_online": 2, "uptime_seconds": 3600,
                    "max_players": 20,
                    "players": [{"name": name, "joined_at": now} for name in ("ann", "bo")],
                }  # fmt: skip
            readings[server] = reading
        return {
            "agent_version": "bench", "outbox_id": self.outbox_id, "servers": self.states,
            "games": ["demo", "freeciv"], "readings": readings,
            "capacity": {"memory_mb": 65536, "disk_mb": 1_000_000, "cpu_percent": 1600},
        }  # fmt: skip

    def acknowledged(self) -> None:
        """Its last heartbeat was answered 200: the minutes it carried are not sent again."""
        self.minutes_until = self.sending_until

    def report(self) -> dict[str, object]:
        """The next move of the next server: crashed, started by the node, ready, ..."""
        turn = next(self.next_report)
        server = self.servers[turn % len(self.servers)]
        kind = CYCLE[(turn // len(self.servers)) % len(CYCLE)]
        self.seq += 1
        self.states[server] = {"crashed": "stopped", "started_by_node": "starting"}.get(
            kind, "running"
        )
        return {
            "outbox_id": self.outbox_id, "seq": self.seq, "server_id": server, "kind": kind,
            "at": None, "pid": 4242, "exit_code": 1 if kind == "crashed" else None,
            "signal": None, "oom": False, "last_output": ["bench"] if kind == "crashed" else [],
        }  # fmt: skip


def make_fleet(count: int, prefix: str) -> list[StandInNode]:
    """`count` nodes registered through the service, `SERVERS` running servers each (written
    in bulk: the set-up is not what is measured)."""
    from accounts.models import Organization
    from servers.fleet.nodes import NodeInput, node_create
    from servers.models import Server, ServerState

    organization, _ = Organization.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    nodes = []
    for n in range(count):
        created = node_create(
            data=NodeInput(
                name=f"{prefix}-{n}", url=f"https://10.0.{n // 250}.{n % 250 + 1}:8444",
                address=f"10.0.{n // 250}.{n % 250 + 1}", ports="27000-27099",
            )
        )  # fmt: skip
        rows = [
            Server(organization=organization, name=f"{prefix}-{n}-{s}", game="demo",
                   node=created.node, port=27000 + s, state=ServerState.RUNNING)
            for s in range(SERVERS)
        ]  # fmt: skip
        Server.objects.bulk_create(rows)
        ids = [row.id for row in rows]
        nodes.append(
            StandInNode(created.node.name, created.token, ids, f"obx_{prefix}{n}",
                        states=dict.fromkeys(ids, "running"))
        )  # fmt: skip
    return nodes


class Web:
    def __init__(self, work: Path) -> None:
        from tests.agent.lines import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.access_log = work / "access.log"
        (work / "metrics").mkdir()
        env = {**ENV, "PROMETHEUS_MULTIPROC_DIR": str(work / "metrics")}
        self.process = gunicorn_start(self.port, access_log=self.access_log, env=env)

    def cpu_seconds(self) -> float:
        from tests.processes import processes

        return sum(p.cpu_seconds for p in processes() if p.group == self.process.pid)

    def stop(self) -> None:
        gunicorn_stop(self.process)


class Driver:
    """Sends each node's heartbeats (every 10 s) and reports (every REPORT_EVERY s), spread
    evenly, from a pool of threads with a keep-alive session each."""

    def __init__(self, web: Web) -> None:
        self.web = web
        self.local = threading.local()
        self.failures: list[str] = []

    def _session(self) -> requests.Session:
        session = getattr(self.local, "session", None)
        if session is None:
            session = self.local.session = requests.Session()
            session.trust_env = False
        return session

    def _post(self, node: StandInNode, path: str, body: dict[str, object]) -> bool:
        if path == "healthz":
            answer = self._session().get(f"{self.web.url}/healthz", timeout=30)
        else:
            answer = self._session().post(
                f"{self.web.url}/internal/nodes/{path}", json=body, timeout=30,
                headers={"Authorization": f"Bearer {node.token}"},
            )  # fmt: skip
        if answer.status_code != 200:
            self.failures.append(f"{path} {answer.status_code} {answer.text[:200]}")
        return answer.status_code == 200

    def run(
        self, nodes: list[StandInNode], seconds: float, reports: bool, beat: str = "heartbeat"
    ) -> None:
        events: list[tuple[float, StandInNode, str]] = []
        for n, node in enumerate(nodes):
            offset = HEARTBEAT_SECONDS * n / len(nodes)
            events += [(offset + k * HEARTBEAT_SECONDS, node, beat)
                       for k in range(int(seconds / HEARTBEAT_SECONDS))]  # fmt: skip
            if reports:
                offset = REPORT_EVERY * n / len(nodes)
                events += [(offset + k * REPORT_EVERY, node, "reports")
                           for k in range(int(seconds / REPORT_EVERY))]  # fmt: skip
        events.sort(key=lambda event: event[0])
        locks = {node.name: threading.Lock() for node in nodes}  # a node's reports in order
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=32) as pool:
            for at, node, path in events:
                delay = start + at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                pool.submit(self._send, locks[node.name], node, path)
            time.sleep(max(0.0, start + seconds - time.monotonic()))  # the whole phase

    def _send(self, lock: threading.Lock, node: StandInNode, path: str) -> None:
        with lock:
            body = node.report() if path == "reports" else node.heartbeat()
            if self._post(node, path, body) and path == "heartbeat":
                node.acknowledged()


def handling_ms(log: Path, offset: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"heartbeat": [], "reports": [], "healthz": []}
    with log.open() as lines:
        lines.seek(offset)
        for line in lines:
            _method, path, status, micros = line.split()
            what = path.rsplit("/", 1)[-1]
            if what in times and status == "200":
                times[what].append(int(micros) / 1000)
    return times


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def phase(
    web: Web, nodes: list[StandInNode], reports: bool, what: str, beat: str = "heartbeat"
) -> dict[str, float]:
    driver = Driver(web)
    offset = web.access_log.stat().st_size if web.access_log.exists() else 0
    cpu_before, started = web.cpu_seconds(), time.monotonic()
    driver.run(nodes, SECONDS, reports, beat)
    cpu, elapsed = web.cpu_seconds() - cpu_before, time.monotonic() - started
    time.sleep(1)  # the access log's last lines
    times = handling_ms(web.access_log, offset)
    figures = {"cpu_percent": 100 * cpu / elapsed}
    print(f"{what}: {len(nodes)} node(s) x {SERVERS} servers, {elapsed:.0f} s")
    for kind, values in times.items():
        if values:
            p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
            figures[f"{kind}_p50"], figures[f"{kind}_p99"] = p50, p99
            print(f"  {kind:<10} n={len(values):<6} p50 {p50:6.1f} ms  p99 {p99:6.1f} ms")
    print(f"  web CPU    {figures['cpu_percent']:5.2f} % of one core")
    if driver.failures:
        print(f"  {len(driver.failures)} calls failed, first: {driver.failures[0]}")
    return figures


def main() -> None:
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    prepare_database()
    setup_django()
    one = make_fleet(1, "solo")
    fleet = make_fleet(NODES, "fleet")
    work = Path(tempfile.mkdtemp(prefix="gshost-bench-fleet-"))
    web = Web(work)
    try:
        idle_before, idle_started = web.cpu_seconds(), time.monotonic()
        time.sleep(5)
        idle = 100 * (web.cpu_seconds() - idle_before) / (time.monotonic() - idle_started)
        print(f"idle web CPU: {idle:.2f} % of one core")
        base = phase(web, one, reports=True, what="baseline")
        bare = phase(web, fleet, reports=False, what="floor: a bare view instead", beat="healthz")
        print(f"warming up: the fleet's heartbeats for {WARMUP:.0f} s, not measured")
        Driver(web).run(fleet, WARMUP, reports=False)  # each web process meets each node
        for node in fleet:
            node.sends_minutes = False
        plain = phase(web, fleet, reports=False, what="fleet at rest, heartbeats without minutes")
        for node in fleet:
            node.sends_minutes = True
        rest = phase(web, fleet, reports=False, what="fleet at rest")
        busy = phase(web, fleet, reports=True, what="fleet with reports")
        print("against the one-node baseline:")
        for name, figures in (("at rest", rest), ("with reports", busy)):
            ratios = ", ".join(
                f"{key} x{figures[key] / base[key]:.2f}"
                for key in ("heartbeat_p50", "heartbeat_p99", "reports_p50", "reports_p99")
                if key in figures and base.get(key)
            )
            print(f"  {name}: {ratios}; web CPU {figures['cpu_percent']:.2f} % of one core")
        print(
            f"  a heartbeat costs x{rest['cpu_percent'] / max(bare['cpu_percent'], 1e-9):.2f} "
            "the web CPU of a bare view at the same rate; the minutes "
            f"x{rest['cpu_percent'] / max(plain['cpu_percent'], 1e-9):.2f} a heartbeat without"
        )
        from servers.models import ServerMinute

        print(f"servers' minutes stored: {ServerMinute.objects.count():,}")
    finally:
        web.stop()
        unmount_under(work)  # the servers' filesystems of agents it killed
        shutil.rmtree(work, ignore_errors=True)
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
