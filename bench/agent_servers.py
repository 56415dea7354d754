"""Benchmark: one node running many `demo` game servers at once (default 50), each in its
sandbox, against the same node running them unsandboxed, in the same run.

For each of the two (sandboxed first, with a pool of BENCH_SERVERS networks and blank
filesystems made ahead, as a node at rest has them; then `AGENT_ALLOW_UNSANDBOXED=true
AGENT_SANDBOX=off`, set only in this process's children), it starts a real
`gshost-agent --stop-servers-on-exit`
with a local stand-in control plane, starts BENCH_SERVERS demo servers through the agent's
HTTPS API and times until every `ready` report (start-all), joins one TCP player to each,
measures the agent's per-game processes (keeper and, sandboxed, bubblewrap's two: PSS) and the
games', and their CPU at rest (BENCH_REST_SECONDS, default 20), then stops every server
through the API and times until every `halted` report (stop-all). Then it ends the agent with
SIGINT and checks that nothing is left (no process, no network of a game, no mount).

The disk mechanism's own cost: BENCH_SERVERS filesystems made as the agent makes a server's
(`gshost_agent.disks`: a sparse image of the default plan, mkfs, mount), each timed (p50, p99),
and the real space (du) of the sandboxed run's images once their games have run.

Prints both runs and the ratios sandboxed / unsandboxed (the aim: per-game overhead at most
8 MB PSS, start-all and stop-all within 1.2x).
"""

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil
import trustme

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gshost_agent.disks import Disks, find_tools  # noqa: E402
from gshost_agent.server_state import DEFAULT_DISK_MB  # noqa: E402
from tests.agent.control_plane import ControlPlane  # noqa: E402
from tests.agent.lines import free_port  # noqa: E402
from tests.processes import unmount_under  # noqa: E402

SERVERS = int(os.environ.get("BENCH_SERVERS", "50"))
REST_SECONDS = int(os.environ.get("BENCH_REST_SECONDS", "20"))
TOKEN = "gsn_" + "b" * 43


@dataclass
class Run:
    name: str
    start_all: float = 0.0
    stop_all: float = 0.0
    overhead_pss_mb: float = 0.0  # per game: its keeper and sandbox helpers
    game_pss_mb: float = 0.0  # per game
    agent_pss_mb: float = 0.0
    cpu_ours: float = 0.0  # % of one core at rest: agent, keepers, sandbox helpers
    cpu_games: float = 0.0
    left: int = 0
    image_kb: list[int] | None = None  # real space of each server's filesystem image


def wait_for(condition, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            sys.exit("timed out")
        time.sleep(0.02)


def kinds(plane: ControlPlane, kind: str, outbox: set[str]) -> int:
    """Reports of that kind from this run's agent, each counted once (a report may be
    delivered twice; the control plane applies it once by its sequence number)."""
    return len(
        {
            report["seq"]
            for report in plane.all_reports()
            if report["kind"] == kind and report["outbox_id"] in outbox
        }
    )


def pss_mb(processes: list[psutil.Process]) -> float:
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            total += process.memory_full_info().pss
    return total / 2**20


def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            total += sum(process.cpu_times()[:2])
    return total


def call(port: int, tls: ssl.SSLContext, path: str, body: dict[str, object]) -> None:
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, context=tls, timeout=60).close()


def bench(name: str, work: Path, plane: ControlPlane, extra_env: dict[str, str]) -> Run:
    run = Run(name)
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "AGENT_TOKEN": TOKEN,
        "AGENT_CONTROL_URL": plane.url,
        "AGENT_DATA_DIR": str(work / f"data-{name}"),
        "AGENT_BIND": f"127.0.0.1:{port}",
        "AGENT_TLS_CERT": str(work / "cert.pem"),
        "AGENT_TLS_KEY": str(work / "key.pem"),
        **extra_env,
    }
    agent = subprocess.Popen(
        [sys.executable, "-m", "gshost_agent", "--stop-servers-on-exit"],
        env=env,
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    try:
        return measure(run, agent, port, work, plane, name, extra_env)
    finally:
        if agent.poll() is None:  # the bench failed: nothing of it stays
            agent.send_signal(signal.SIGINT)
            try:
                agent.wait(timeout=30)
            except subprocess.TimeoutExpired:
                agent.kill()


def measure(
    run: Run,
    agent: subprocess.Popen[bytes],
    port: int,
    work: Path,
    plane: ControlPlane,
    name: str,
    extra_env: dict[str, str],
) -> Run:
    tls = ssl.create_default_context(cafile=str(work / "ca.pem"))
    wait_for(lambda: _listening(port), 30)
    pool = int(extra_env.get("AGENT_NETWORK_POOL", "0"))
    wait_for(lambda: _pooled(agent.pid) >= pool, 60)  # a node at rest has its pool made
    blanks = work / f"data-{name}" / "disks" / "pool"
    wait_for(lambda: len(_mounts_under(blanks)) >= pool, 600)  # and its blank filesystems
    outbox = {
        json.loads((work / f"data-{name}" / "outbox" / "outbox.json").read_text())["outbox_id"]
    }
    ids = [f"srv_bench{name[:3]}{number:013d}" for number in range(SERVERS)]
    game_ports = [free_port() for _ in ids]
    began = time.monotonic()
    for number, server_id in enumerate(ids):
        for _ in range(3):  # a port taken meanwhile by another program: another one
            body = {"game": "demo", "port": game_ports[number], "memory_mb": 128}
            try:
                call(port, tls, f"/v1/servers/{server_id}/start", body)
                break
            except urllib.error.HTTPError as error:
                if error.code != 409:
                    raise
                game_ports[number] = free_port()
    wait_for(lambda: kinds(plane, "ready", outbox) == SERVERS, 300)
    run.start_all = time.monotonic() - began
    players = [socket.create_connection(("127.0.0.1", p), timeout=10) for p in game_ports]
    for number, player in enumerate(players):
        player.sendall(f"JOIN player{number}\n".encode())
        assert player.makefile().readline().startswith("WELCOME")
    family = [psutil.Process(agent.pid), *psutil.Process(agent.pid).children(recursive=True)]
    games = [p for p in family if _is_game(p)]
    ours = [p for p in family[1:] if p not in games]  # keepers, sandbox helpers
    before = (cpu_seconds(family[:1] + ours), cpu_seconds(games))
    time.sleep(REST_SECONDS)
    after = (cpu_seconds(family[:1] + ours), cpu_seconds(games))
    run.cpu_ours = 100 * (after[0] - before[0]) / REST_SECONDS
    run.cpu_games = 100 * (after[1] - before[1]) / REST_SECONDS
    run.agent_pss_mb = pss_mb(family[:1])
    run.overhead_pss_mb = pss_mb(ours) / SERVERS
    run.game_pss_mb = pss_mb(games) / len(games)
    for player in players:
        player.close()
    began = time.monotonic()
    for server_id in ids:
        call(port, tls, f"/v1/servers/{server_id}/stop", {})
    wait_for(lambda: kinds(plane, "halted", outbox) == SERVERS, 120)
    run.stop_all = time.monotonic() - began
    agent.send_signal(signal.SIGINT)
    agent.wait(timeout=30)
    run.left = len([p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE])
    run.left += len(_mounts_under(work / f"data-{name}"))
    images = sorted((work / f"data-{name}" / "disks").glob("srv_*.img"))
    run.image_kb = [image.stat().st_blocks // 2 for image in images] or None
    return run


def _mounts_under(directory: Path) -> list[str]:
    marker = f"{directory}/"
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line.split()[4] for line in lines if line.split()[4].startswith(marker)]


def filesystem_costs(work: Path) -> list[float]:
    """Seconds to make each of BENCH_SERVERS servers' filesystems (image, mkfs, mount), as the
    agent makes one at a server's first start; each unmounted and removed after."""
    tools = find_tools()
    if tools is None:
        return []
    disks = Disks(work / "disks", tools)
    disks.prepare()
    seconds = []
    for number in range(SERVERS):
        name, mount_point = f"srv_bench{number:013d}", work / "mounts" / f"{number}"
        mount_point.mkdir(parents=True)
        began = time.perf_counter()
        disks.make(name, mount_point, DEFAULT_DISK_MB)
        seconds.append(time.perf_counter() - began)
        disks.remove(name, mount_point)
    return seconds


def _pooled(agent_pid: int) -> int:
    """Networks the agent has made ahead (its pool, in the machine's registry of slots)."""
    count = 0
    for path in Path("/run/gshost-sandbox/slots").glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            count += json.loads(path.read_text()).get("pooled_by") == agent_pid
    return count


def _is_game(process: psutil.Process) -> bool:
    try:
        command = process.cmdline()
    except psutil.Error:
        return False
    return bool(command) and "demo_game.py" in " ".join(command) and "bwrap" not in command[0]


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="gshost-bench-agent-", dir="/tmp"))
    os.chmod(work, 0o711)
    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(work / "ca.pem"))
    issued = authority.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(str(work / "cert.pem"))
    issued.private_key_pem.write_to_path(str(work / "key.pem"))
    plane = ControlPlane(port=free_port(), token=TOKEN)
    plane.up()
    try:
        made = filesystem_costs(work)
        runs = [
            bench("sandboxed", work, plane, {"AGENT_NETWORK_POOL": str(SERVERS)}),
            # The baseline, in this process's child only: never in Makefile, scripts or CI.
            bench(
                "unsandboxed",
                work,
                plane,
                {"AGENT_ALLOW_UNSANDBOXED": "true", "AGENT_SANDBOX": "off"},
            ),
        ]
    finally:
        plane.down()
        unmount_under(work)  # the servers' filesystems of agents it killed
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{SERVERS} demo servers; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    print(
        f"{'':<12} {'start-all':>9} {'stop-all':>9} {'per game: ours':>15} {'game':>6} "
        f"{'agent':>6} {'CPU ours':>9} {'games':>6} {'left':>5}"
    )
    for run in runs:
        print(
            f"{run.name:<12} {run.start_all:8.1f}s {run.stop_all:8.1f}s "
            f"{run.overhead_pss_mb:12.1f} MB {run.game_pss_mb:5.1f} {run.agent_pss_mb:6.1f} "
            f"{run.cpu_ours:8.2f}% {run.cpu_games:5.2f}% {run.left:>5}"
        )
    sandboxed, baseline = runs
    print(
        f"sandboxed / unsandboxed: start-all x{sandboxed.start_all / baseline.start_all:.2f}, "
        f"stop-all x{sandboxed.stop_all / baseline.stop_all:.2f} (aim: at most x1.20); "
        f"per-game overhead {sandboxed.overhead_pss_mb:.1f} MB PSS (aim: at most 8 MB)"
    )
    print("(PSS: each shared page counted once across the processes that map it.)")
    print(f"median game memory: {statistics.median([r.game_pss_mb for r in runs]):.1f} MB PSS")
    if made:
        p50, p99 = statistics.median(made), sorted(made)[min(len(made) - 1, len(made) * 99 // 100)]
        print(
            f"a server's filesystem ({DEFAULT_DISK_MB} MB plan): made in {p50 * 1000:.0f} ms p50, "
            f"{p99 * 1000:.0f} ms p99 over {len(made)}"
        )
    if sandboxed.image_kb:
        kb = sandboxed.image_kb
        print(
            f"real space of a server's image after its game ran: {statistics.median(kb) / 1024:.1f}"
            f" MB median, {max(kb) / 1024:.1f} MB most, {sum(kb) / 1024:.0f} MB for {len(kb)}"
        )


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


if __name__ == "__main__":
    main()
