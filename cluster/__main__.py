"""`python -m cluster` (`make cluster`): start the cluster, print its URL, run until Ctrl-C,
SIGTERM or SIGHUP, then stop everything it started.

    CLUSTER_PORT          the load balancer's port on 127.0.0.1 (8080)
    CLUSTER_DATABASE_URL  PostgreSQL itself (postgres://postgres@127.0.0.1:5432/gshost_cluster)
    CLUSTER_WEB           web replicas (2)
    CLUSTER_WORKERS       worker hosts (2)
    CLUSTER_RUN_DIR       configurations, logs and the secret key (run/cluster)
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from cluster.stack import ROOT, Cluster, ClusterSettings, tools_missing


class Stop(Exception):
    pass


def _stop(signum: int, frame: FrameType | None) -> None:
    raise Stop(signal.Signals(signum).name)


def _secret_key(run_dir: Path) -> str:
    """Kept across runs: API keys are checked with a pepper derived from it."""
    path = run_dir / "secret-key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


def main() -> int:
    missing = tools_missing()
    if missing:
        print(f"missing: {', '.join(missing)} (scripts/ensure-cluster-tools.sh installs them)")
        return 1
    if os.geteuid() != 0:
        print("the cluster makes network namespaces: run it as root")
        return 1
    run_dir = Path(os.environ.get("CLUSTER_RUN_DIR") or ROOT / "run" / "cluster").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = ClusterSettings(
        database_url=os.environ.get("CLUSTER_DATABASE_URL")
        or "postgres://postgres@127.0.0.1:5432/gshost_cluster",
        web_replicas=int(os.environ.get("CLUSTER_WEB", "2")),
        worker_hosts=int(os.environ.get("CLUSTER_WORKERS", "2")),
        port=int(os.environ.get("CLUSTER_PORT", "8080")),
        secret_key=_secret_key(run_dir),
        run_dir=run_dir,
    )
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop)
    cluster = Cluster(settings)
    try:
        cluster.start()
        print(f"gshost cluster: {cluster.url}  (logs: {run_dir})", flush=True)
        for name, host in cluster.hosts.items():
            print(f"  {name:<8} {host.address:<15} namespace {host.namespace}", flush=True)
        print(f"  pgbouncer 127.0.0.1,{cluster.gateway}:{cluster.pgbouncer_port}", flush=True)
        print(f"  redis     127.0.0.1,{cluster.gateway}:{cluster.redis_port}", flush=True)
        print("Ctrl-C stops everything.", flush=True)
        _watch(cluster)
    except Stop as stop:
        print(f"{stop}: stopping the cluster", flush=True)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up
        cluster.stop()
        print("stopped load balancer, replicas, workers, PgBouncer and Redis", flush=True)
    return 0


def _watch(cluster: Cluster) -> None:
    """Say when a host dies: the cluster keeps serving with the others. Stop when the parent
    goes (SIGTERM to `make` ends make alone: its children are orphaned)."""
    reported: set[str] = set()
    parent = os.getppid()
    while True:
        if os.getppid() != parent:
            raise Stop("parent exited")
        for process in [*cluster.web, *cluster.workers]:
            if not process.running() and process.name not in reported:
                reported.add(process.name)
                print(f"{process.name} exited; see {process.log}", flush=True)
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
