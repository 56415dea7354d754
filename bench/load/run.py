"""The cluster under load (`make bench-load`): 10,000 servers on a stand-in fleet, 1,000 API
keys polling, crashes and starts at a steady rate with bursts, webhooks to a local receiver.

One cluster, two phases on the same data: two web replicas and two worker hosts, then one of
each (the other replica taken out of HAProxy's rotation, the other worker host stopped). For
each phase: Locust's requests/s, p50 and p99 per route, the deliveries completed per second and
the event -> first attempt p50/p99 (from the delivery rows), and the ratio of the two.

    .venv/bin/python bench/load/run.py [--phase-seconds 120] [--users 1000] [--pacing 30]
        [--nodes 250] [--servers 10000] [--events-per-second 4] [--burst-every 30]

Needs root (network namespaces), Debian's HAProxy and PgBouncer, PostgreSQL on 127.0.0.1.
Writes bench/results/load.json. On 2 shared cores the ratio and the correctness matter, not
the absolute rate.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import trustme

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cluster.network import MACHINE_NAME  # noqa: E402
from cluster.stack import Cluster, ClusterSettings, free_port  # noqa: E402

DATABASE_URL = os.environ.get(
    "LOAD_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gshost_bench_load"
)
ROUTES = ["/servers", "realtime-stats", "players", "audit"]
RESULTS = ROOT / "bench" / "results"


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase-seconds", type=int, default=120)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--pacing", type=float, default=30.0, help="seconds between a key's calls")
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--servers", type=int, default=10_000)
    parser.add_argument("--organizations", type=int, default=100)
    parser.add_argument("--events-per-second", type=float, default=4.0)
    parser.add_argument("--burst-every", type=float, default=30.0)
    parser.add_argument("--table", action="store_true", help="print the last run's table only")
    return parser.parse_args()


def fresh_database() -> None:
    name = DATABASE_URL.rsplit("/", 1)[1]
    admin = DATABASE_URL.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')


def certificate(run_dir: Path) -> tuple[str, str, str]:
    ca = trustme.CA()
    cert = ca.issue_cert(MACHINE_NAME)
    paths = run_dir / "far-ca.pem", run_dir / "far-cert.pem", run_dir / "far-key.pem"
    ca.cert_pem.write_to_path(str(paths[0]))
    cert.private_key_and_cert_chain_pem.write_to_path(str(paths[1]))
    cert.private_key_pem.write_to_path(str(paths[2]))
    return str(paths[0]), str(paths[1]), str(paths[2])


def seed(cluster: Cluster, opts: argparse.Namespace, far_url: str, ca: str) -> dict[str, Any]:
    keys = opts.users
    argv = [sys.executable, str(ROOT / "bench/load/seed.py"), far_url, ca, f"{far_url}/hook"]
    argv += [str(opts.nodes), str(opts.servers), str(opts.organizations), str(keys)]
    done = subprocess.run(
        argv, cwd=ROOT, env=cluster.command_env(), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"seeding failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def database_now() -> float:
    with psycopg.connect(DATABASE_URL) as connection:
        row = connection.execute("SELECT extract(epoch FROM now())").fetchone()
        assert row is not None
        return float(row[0])


def _percentile(fraction: float) -> str:
    lag = "extract(epoch FROM first_attempt_at - created_at)"
    return f"percentile_cont({fraction}) WITHIN GROUP (ORDER BY {lag})"


def delivery_figures(started: float, ended: float) -> dict[str, Any]:
    window = "to_timestamp(%s) AND to_timestamp(%s)"
    with psycopg.connect(DATABASE_URL) as connection:
        completed = connection.execute(
            f"SELECT count(*) FROM webhooks_delivery WHERE completed_at BETWEEN {window}",
            [started, ended],
        ).fetchone()
        lag = connection.execute(
            f"SELECT count(*), count(first_attempt_at), {_percentile(0.5)}, {_percentile(0.99)} "
            f"FROM webhooks_delivery WHERE created_at BETWEEN {window}",
            [started, ended],
        ).fetchone()
    assert completed is not None and lag is not None
    return {
        "deliveries_per_second": completed[0] / (ended - started),
        "events_deliveries_created": lag[0],
        "attempted": lag[1],
        "first_attempt_p50_ms": None if lag[2] is None else lag[2] * 1000,
        "first_attempt_p99_ms": None if lag[3] is None else lag[3] * 1000,
    }


def run_locust(cluster: Cluster, opts: argparse.Namespace, keys_file: Path, name: str) -> dict:
    prefix = cluster.run_dir / f"locust-{name}"
    env = {
        **os.environ,
        "LOAD_KEYS_FILE": str(keys_file),
        "LOAD_PACING_SECONDS": str(opts.pacing),
    }
    argv = [
        str(Path(sys.executable).parent / "locust"),
        "-f",
        str(ROOT / "bench/load/locustfile.py"),
    ]
    argv += [
        "--headless",
        "--only-summary",
        "-u",
        str(opts.users),
        "-r",
        str(max(1, opts.users // 10)),
    ]
    argv += ["-t", f"{opts.phase_seconds}s", "--host", cluster.url, "--csv", str(prefix)]
    argv += ["--loglevel", "WARNING"]
    with open(f"{prefix}.log", "w") as log:
        subprocess.run(argv, cwd=ROOT, env=env, check=False, stdout=log, stderr=subprocess.STDOUT)
    routes: dict[str, Any] = {}
    with open(f"{prefix}_stats.csv") as stats:
        for row in csv.DictReader(stats):
            routes[row["Name"]] = {
                "requests": int(row["Request Count"]),
                "failures": int(row["Failure Count"]),
                "rps": float(row["Requests/s"]),
                "p50_ms": float(row["50%"] or 0),
                "p99_ms": float(row["99%"] or 0),
            }
    return routes


def phase(cluster: Cluster, opts: argparse.Namespace, keys_file: Path, name: str) -> dict:
    started = database_now()
    load_before = os.getloadavg()[0]
    routes = run_locust(cluster, opts, keys_file, name)
    ended = database_now()
    return {
        "routes": routes,
        **delivery_figures(started, ended),
        "load_average": [load_before, os.getloadavg()[0]],
    }


def ratio(one: float | None, two: float | None) -> str:
    return "—" if not one or two is None else f"{two / one:.2f}"


def table(results: dict[str, Any]) -> str:
    two, one = results["2 web + 2 workers"], results["1 web + 1 worker"]
    lines = [
        "| route | 2+2 req/s | p50 ms | p99 ms | failed | 1+1 req/s | p50 ms | p99 ms | failed "
        "| req/s 2+2 : 1+1 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for route in [*ROUTES, "Aggregated"]:
        a, b = two["routes"].get(route), one["routes"].get(route)
        if a is None or b is None:
            continue
        cells = [
            f"{r['rps']:.1f} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['failures']}"
            for r in (a, b)
        ]
        lines.append(f"| {route} | {cells[0]} | {cells[1]} | {ratio(b['rps'], a['rps'])} |")
    for label, key in [
        ("deliveries/s", "deliveries_per_second"),
        ("event → first attempt p50 ms", "first_attempt_p50_ms"),
        ("event → first attempt p99 ms", "first_attempt_p99_ms"),
    ]:
        a, b = two[key], one[key]
        shown = [f"{v:.1f}" if v is not None else "—" for v in (a, b)]
        lines.append(f"| {label} | {shown[0]} | | | | {shown[1]} | | | | {ratio(b, a)} |")
    return "\n".join(lines)


def main() -> int:
    opts = options()
    if opts.table:
        print(table(json.loads((RESULTS / "load.json").read_text())["phases"]))
        return 0
    fresh_database()
    settings = ClusterSettings(
        database_url=DATABASE_URL,
        env={
            "WEBHOOK_ALLOWED_NETWORKS": "10.210.0.0/16",
            "WEBHOOKS_PER_ORGANIZATION": "100",
            "LOG_LEVEL": "WARNING",
            "GUNICORN_LOG_LEVEL": "warning",
        },
    )
    cluster = Cluster(settings)
    far: subprocess.Popen[str] | None = None
    try:
        gateway = cluster.create_network()
        ca, cert, key = certificate(cluster.run_dir)
        settings.env = {**settings.env, "WEBHOOK_CA_BUNDLE": ca}
        cluster.start()
        port = free_port()
        far_url = f"https://{MACHINE_NAME}:{port}"
        print(f"cluster up at {cluster.url}; seeding {opts.servers} servers on {opts.nodes} nodes")
        data = seed(cluster, opts, far_url, ca)
        keys = [
            {"key": key_value, "servers": org["servers"]}
            for org in data["organizations"]
            for key_value in org["keys"]
        ]
        keys_file = cluster.run_dir / "keys.json"
        keys_file.write_text(json.dumps(keys))
        config = {
            "control_url": cluster.url,
            "bind": gateway,
            "port": port,
            "cert_file": cert,
            "key_file": key,
            "nodes": data["nodes"],
            "events_per_second": opts.events_per_second,
            "burst_every_seconds": opts.burst_every,
        }
        config_file = cluster.run_dir / "far-side.json"
        config_file.write_text(json.dumps(config))
        far = subprocess.Popen(
            [sys.executable, str(ROOT / "bench/load/far_side.py"), str(config_file)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert far.stdout is not None
        far.stdout.readline()  # {"ready": true}
        time.sleep(12)  # every node's first heartbeat: the nodes are online
        far.send_signal(signal.SIGUSR1)
        print("warming up: 30 s of the same load, not measured")
        warm_up = argparse.Namespace(**{**vars(opts), "phase_seconds": 30})
        run_locust(cluster, warm_up, keys_file, "warm-up")
        print(f"phase 1: 2 web replicas + 2 worker hosts, {opts.phase_seconds} s")
        results = {"2 web + 2 workers": phase(cluster, opts, keys_file, "2x2")}
        cluster.disable_web("web2")
        cluster.stop_host("worker2")
        print(f"phase 2: 1 web replica + 1 worker host, {opts.phase_seconds} s")
        results["1 web + 1 worker"] = phase(cluster, opts, keys_file, "1x1")
        far.send_signal(signal.SIGTERM)
        far_counts = json.loads(far.communicate(timeout=30)[0].strip().splitlines()[-1])
        far = None
    finally:
        if far is not None:
            far.kill()
        cluster.stop()
    report = {
        "options": vars(opts),
        "cpus": os.cpu_count(),
        "phases": results,
        "far_side": far_counts,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "load.json").write_text(json.dumps(report, indent=2))
    print(table(results))
    print(f"far side: {far_counts}")
    for name, figures in results.items():
        before, after = figures["load_average"]
        print(f"{name}: load average {before:.1f} -> {after:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
