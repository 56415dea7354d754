"""Benchmark: one node running many `demo` game servers at once (default 50).

Starts a real `gshost-agent --stop-servers-on-exit` (as `make run` does) with a local stand-in
control plane that acknowledges its reports, starts BENCH_SERVERS demo servers through the
agent's HTTPS API, waits for every `ready` report, joins one TCP player to each, and prints
the time it took and the resident memory of the agent, its keepers and the games, and their
CPU at rest (BENCH_REST_SECONDS, default 30) against the games' own. Then it
ends the agent with SIGINT and checks that every game stopped within 10 s, with a
`stopped_by_node` report each, and that no process is left.
"""

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
import urllib.request
from pathlib import Path

import psutil
import trustme

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.agent.control_plane import ControlPlane  # noqa: E402
from tests.agent.lines import free_port  # noqa: E402

SERVERS = int(os.environ.get("BENCH_SERVERS", "50"))
REST_SECONDS = int(os.environ.get("BENCH_REST_SECONDS", "30"))
TOKEN = "gsn_" + "b" * 43


def wait_for(condition, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            sys.exit("timed out")
        time.sleep(0.1)


def kinds(plane: ControlPlane, kind: str) -> int:
    """Reports of that kind, each counted once: a report may be delivered twice (its answer
    lost), the stand-in control plane applies it once by its sequence number."""
    return len([report for report in plane.all_reports() if report["kind"] == kind])


def rss_mb(processes: list[psutil.Process]) -> list[float]:
    return [p.memory_info().rss / 2**20 for p in processes]


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="gshost-bench-agent-", dir="/tmp"))
    os.chmod(work, 0o711)  # the game user passes through to its server's directory
    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(work / "ca.pem"))
    issued = authority.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(str(work / "cert.pem"))
    issued.private_key_pem.write_to_path(str(work / "key.pem"))
    plane = ControlPlane(port=free_port(), token=TOKEN)
    plane.up()
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "AGENT_TOKEN": TOKEN,
        "AGENT_CONTROL_URL": plane.url,
        "AGENT_DATA_DIR": str(work / "data"),
        "AGENT_BIND": f"127.0.0.1:{port}",
        "AGENT_TLS_CERT": str(work / "cert.pem"),
        "AGENT_TLS_KEY": str(work / "key.pem"),
    }
    agent = subprocess.Popen(
        [sys.executable, "-m", "gshost_agent", "--stop-servers-on-exit"],
        env=env,
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    tls = ssl.create_default_context(cafile=str(work / "ca.pem"))
    wait_for(lambda: _listening(port), 30)
    began = time.monotonic()
    game_ports = []
    for number in range(SERVERS):
        game_ports.append(free_port())
        body = {"game": "demo", "port": game_ports[-1], "memory_mb": 128}
        request = urllib.request.Request(
            f"https://127.0.0.1:{port}/v1/servers/srv_bench{number:016d}/start",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, context=tls, timeout=30).close()
    wait_for(lambda: kinds(plane, "ready") == SERVERS, 180)
    print(f"{SERVERS} demo servers ready in {time.monotonic() - began:.1f} s")
    players = [socket.create_connection(("127.0.0.1", p), timeout=10) for p in game_ports]
    for number, player in enumerate(players):
        player.sendall(f"JOIN player{number}\n".encode())
        assert player.makefile().readline().startswith("WELCOME")
    print(f"{SERVERS} players joined")
    family = [psutil.Process(agent.pid), *psutil.Process(agent.pid).children(recursive=True)]
    keepers = [p for p in family if "gshost_agent.keeper" in " ".join(p.cmdline())]
    games = [p for p in family if "demo_game.py" in " ".join(p.cmdline())]
    print(f"agent: {rss_mb(family[:1])[0]:.0f} MB resident")
    print(f"keepers: {len(keepers)}, median {statistics.median(rss_mb(keepers)):.1f} MB each")
    print(f"games: {len(games)}, median {statistics.median(rss_mb(games)):.1f} MB each")
    at_rest(family[0], keepers, games)
    ending = time.monotonic()
    agent.send_signal(signal.SIGINT)
    agent.wait(timeout=30)
    print(f"agent and games ended in {time.monotonic() - ending:.1f} s (limit 10 s)")
    print(f"stopped_by_node reports: {kinds(plane, 'stopped_by_node')} of {SERVERS}")
    left = [p.pid for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    print(f"processes left: {left or 'none'}")
    for player in players:
        player.close()
    plane.down()
    shutil.rmtree(work, ignore_errors=True)


def at_rest(
    agent: psutil.Process, keepers: list[psutil.Process], games: list[psutil.Process]
) -> None:
    """Memory and CPU of the agent and its keepers against the games' own, over REST_SECONDS
    with every server running and a player on each (the agent samples every server every
    10 s and sends a heartbeat every 10 s meanwhile)."""
    roles = {"agent": [agent], "keepers": keepers, "games": games}

    def cpu() -> dict[str, float]:
        return {role: sum(sum(p.cpu_times()[:2]) for p in group) for role, group in roles.items()}

    before = cpu()
    time.sleep(REST_SECONDS)
    used = {role: seconds - before[role] for role, seconds in cpu().items()}
    memory = {role: sum(rss_mb(group)) for role, group in roles.items()}
    # PSS shares each page among the processes that map it (the interpreter's, mostly).
    pss = {
        role: sum(p.memory_full_info().pss for p in group) / 2**20 for role, group in roles.items()
    }
    print(f"at rest for {REST_SECONDS} s (CPU as % of one core; memory RSS, and PSS):")
    for role in roles:
        share = 100 * used[role] / REST_SECONDS
        print(
            f"  {role:<8} CPU {share:5.2f} %   RSS {memory[role]:6.0f} MB   PSS {pss[role]:6.0f} MB"
        )
    ours_cpu, ours_memory = used["agent"] + used["keepers"], memory["agent"] + memory["keepers"]
    print(
        f"  agent + keepers against the games: CPU x{ours_cpu / max(used['games'], 1e-9):.2f}, "
        f"memory x{ours_memory / memory['games']:.2f} (RSS), "
        f"x{(pss['agent'] + pss['keepers']) / pss['games']:.2f} (PSS)"
    )


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


if __name__ == "__main__":
    main()
