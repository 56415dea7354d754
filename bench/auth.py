"""Benchmark: what authentication, scope checks, rate limiting and auditing cost per request.

Starts the service under gunicorn with the shipped configuration (gunicorn.conf.py: 2 worker
processes with threads) on PostgreSQL + Redis and measures, in one
run on this machine, requests/s and p50/p99 latency of
  (a) GET /healthz - a bare DRF view with no authentication, and
  (b) GET /api/public/v1/account/keys/current with a valid key - authenticated, scope-checked,
      rate-limited and audited,
then prints the ratio b/a (target >= 0.8). The load comes from `wrk` (Debian package `wrk`).

The runs are interleaved in rounds, (a) then (b). On a shared 2-vCPU machine single runs swing
by 20 % or more, so the ratio judged is the median of the rounds' own b/a ratios; the ratio of
the best runs of each is printed beside it.
The per-key limit is raised for the run so every request does the full work and none is 429.
"""

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.web_rig import gunicorn_start, gunicorn_stop  # noqa: E402

PYTHON = ROOT / ".venv" / "bin" / "python"
DB_NAME = "gshost_bench"
DURATION = int(os.environ.get("BENCH_SECONDS", "6"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "8"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))

ENV = {
    **os.environ,
    "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
    "REDIS_URL": "redis://127.0.0.1:6379/14",
    "DEBUG": "false",
    "SECRET_KEY": "bench-secret-key-not-for-production",
    "API_RATE_DEFAULT": "100000000/min",
    "LOG_LEVEL": "WARNING",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def manage(*args: str) -> str:
    done = subprocess.run(
        [str(PYTHON), "manage.py", *args], cwd=ROOT, env=ENV, check=True, capture_output=True
    )
    return done.stdout.decode()


def prepare_database() -> str:
    """A fresh database with one organization and one key; returns the full key."""
    for sql in (f"DROP DATABASE IF EXISTS {DB_NAME}", f"CREATE DATABASE {DB_NAME}"):
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", sql], check=True)
    subprocess.run(["redis-cli", "-n", "14", "flushdb"], check=True, capture_output=True)
    manage("migrate", "--noinput")
    script = (
        "from accounts.services import organization_create, member_add, api_key_create\n"
        "from audit.actors import Actor\n"
        "from audit.services import PanelContext\n"
        "org = organization_create(slug='bench', name='Bench')\n"
        "owner = member_add(organization=org, email='bench@example.com', password='x',\n"
        "                   owner=True)\n"
        "new = api_key_create(membership=owner, name='bench', scopes=['servers:read'],\n"
        "                     actor=Actor.person(PanelContext(user_email='bench@example.com')))\n"
        "print(new.full_key)\n"
    )
    return manage("shell", "-c", script).strip().splitlines()[-1]


def wrk(url: str, headers: dict[str, str], seconds: int) -> dict[str, float]:
    header_args = [arg for name, value in headers.items() for arg in ("-H", f"{name}: {value}")]
    done = subprocess.run(
        ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", "--latency", *header_args, url],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    out = done.stdout
    if "Non-2xx" in out:
        raise SystemExit(f"non-2xx answers during the benchmark:\n{out}")
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "p50_ms": _latency(out, "50%"),
        "p99_ms": _latency(out, "99%"),
    }


def _latency(out: str, percentile: str) -> float:
    value, unit = re.search(rf"{percentile}\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    return max(runs, key=lambda run: run["rps"])


def main() -> None:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    full_key = prepare_database()
    port = free_port()
    server = gunicorn_start(port, access_log="/dev/null", env=ENV)
    base = f"http://127.0.0.1:{port}"
    bearer = {"Authorization": f"Bearer {full_key}"}
    targets = {
        "bare": (f"{base}/healthz", {}),
        "key": (f"{base}/api/public/v1/account/keys/current", bearer),
    }
    try:
        for url, headers in targets.values():
            wrk(url, headers, 2)  # warm-up: imports, connections, caches
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        for _ in range(ROUNDS):  # interleaved, so drift on the machine hits both alike
            for name, (url, headers) in targets.items():
                runs[name].append(wrk(url, headers, DURATION))
    finally:
        gunicorn_stop(server)
    report(best(runs["bare"]), best(runs["key"]), runs)


def report(
    bare: dict[str, float], key: dict[str, float], runs: dict[str, list[dict[str, float]]]
) -> None:
    round_ratios = [k["rps"] / b["rps"] for b, k in zip(runs["bare"], runs["key"], strict=True)]
    ratio = statistics.median(round_ratios)
    print(
        "gunicorn.conf.py (2 workers x threads), PostgreSQL + Redis, "
        f"wrk 1 thread x {CONNECTIONS} connections"
    )
    print(f"{'':44} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for label, figures in (
        ("(a) GET /healthz (bare DRF view)", bare),
        ("(b) GET /account/keys/current (key, audited)", key),
    ):
        print(f"{label:44} {figures['rps']:9.0f} {figures['p50_ms']:8.2f} {figures['p99_ms']:8.2f}")
    print(
        f"ratio b/a: {ratio:.2f}  (median of the rounds: "
        f"{', '.join(f'{r:.2f}' for r in round_ratios)}; best runs: "
        f"{key['rps'] / bare['rps']:.2f}; target >= 0.80)"
    )
    print("all runs: " + json.dumps(runs))
    sys.exit(0 if ratio >= 0.8 else 1)


if __name__ == "__main__":
    main()
