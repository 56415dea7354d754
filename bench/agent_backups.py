"""Benchmark: backups and restores through a real `gshost-agent`, against `tar` in the same run.

Makes a world of BENCH_BACKUP_MB megabytes (default 1024) in a server's directory: half random
bytes (as compressed game data), half repetitive records (as text saves), in files of 1 to
32 MB under a few directories. Then, one after the other:

- `tar -czf` of that directory (gzip -6), timed;
- a backup job through the agent's HTTPS API, timed from the request to its `job_finished`
  report, while the agent's resident memory is sampled every 50 ms (and once at rest before);
- `tar -xzf` of tar's archive into a fresh directory, timed;
- a restore job of the agent's archive, timed likewise (it reads the archive twice: once to
  check its SHA-256, once to extract it).

Prints each figure, the throughputs (MB of world per second) and the agent's over tar's
ratios (the target is at least 0.8), and the agent's peak memory during the backup against
its memory at rest (flat: the archive is streamed, never held).
"""

import json
import os
import secrets
import shutil
import signal
import socket
import ssl
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

WORLD_MB = int(os.environ.get("BENCH_BACKUP_MB", "1024"))
TOKEN = "gsn_" + "b" * 43
SERVER_ID = "srv_benchbackups00000001"


def make_world(directory: Path, megabytes: int) -> None:
    record = b"".join(
        f"chunk {n:06d} biome=plains height={n % 97} owner=player{n % 13}\n".encode()
        for n in range(2000)
    )
    written, number = 0, 0
    while written < megabytes * 2**20:
        size = min((1 + number % 32) * 2**20, megabytes * 2**20 - written)
        folder = directory / f"region-{number % 8}"
        folder.mkdir(exist_ok=True)
        with open(folder / f"r.{number}.dat", "wb") as out:
            left = size
            while left > 0:
                piece = os.urandom(2**20) if number % 2 else (record * 20)[: 2**20]
                out.write(piece[:left])
                left -= len(piece[:left])
        written, number = written + size, number + 1


def timed(command: list[str]) -> float:
    began = time.monotonic()
    subprocess.run(command, check=True)
    return time.monotonic() - began


class Agent:
    def __init__(self, work: Path) -> None:
        authority = trustme.CA()
        authority.cert_pem.write_to_path(str(work / "ca.pem"))
        issued = authority.issue_cert("127.0.0.1")
        issued.cert_chain_pems[0].write_to_path(str(work / "cert.pem"))
        issued.private_key_pem.write_to_path(str(work / "key.pem"))
        self.plane = ControlPlane(port=free_port(), token=TOKEN)
        self.plane.up()
        self.port = free_port()
        self.data = work / "data"
        env = {
            "PATH": os.environ["PATH"],
            "AGENT_TOKEN": TOKEN,
            "AGENT_CONTROL_URL": self.plane.url,
            "AGENT_DATA_DIR": str(self.data),
            "AGENT_BIND": f"127.0.0.1:{self.port}",
            "AGENT_TLS_CERT": str(work / "cert.pem"),
            "AGENT_TLS_KEY": str(work / "key.pem"),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gshost_agent"], env=env, cwd=ROOT, stderr=subprocess.DEVNULL
        )
        self.tls = ssl.create_default_context(cafile=str(work / "ca.pem"))
        deadline = time.monotonic() + 30
        while not _listening(self.port):
            if time.monotonic() > deadline:
                sys.exit("the agent did not start")
            time.sleep(0.1)

    def call(self, method: str, path: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.port}/v1/servers/{SERVER_ID}/{path}",
            data=json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=self.tls, timeout=30) as answer:
            return dict(json.loads(answer.read()))

    def rss_mb(self) -> float:
        return psutil.Process(self.process.pid).memory_info().rss / 2**20

    def job(self, kind: str, **fields: str) -> tuple[float, float, dict]:
        """Seconds from the request to its `job_finished`, the peak RSS meanwhile, the report."""
        job_id = "job_" + secrets.token_hex(10)
        began = time.monotonic()
        self.call("POST", "jobs", {"job_id": job_id, "kind": kind, "game": "demo", **fields})
        peak = self.rss_mb()
        while True:
            done = [r for r in self.plane.all_reports() if r.get("job_id") == job_id
                    and r["kind"] == "job_finished"]  # fmt: skip
            if done:
                if not done[0]["succeeded"]:
                    sys.exit(f"the {kind} failed: {done[0]['error']}")
                return time.monotonic() - began, peak, done[0]
            peak = max(peak, self.rss_mb())
            time.sleep(0.05)

    def end(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        self.plane.down()


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="gshost-bench-backups-", dir="/tmp"))
    os.chmod(work, 0o711)
    agent = Agent(work)
    try:
        agent.call("PUT", "settings", {"game": "demo", "settings": {}})
        world = agent.data / "servers" / SERVER_ID
        began = time.monotonic()
        make_world(world, WORLD_MB)
        subprocess.run(["sync"], check=True)
        print(f"world: {WORLD_MB} MB in {time.monotonic() - began:.1f} s")
        run(agent, world, work)
    finally:
        agent.end()
        shutil.rmtree(work, ignore_errors=True)


def run(agent: Agent, world: Path, work: Path) -> None:
    megabytes = WORLD_MB
    tar_archive = work / "tar.tar.gz"
    tar_backup = timed(["tar", "-czf", str(tar_archive), "-C", str(world), "."])
    at_rest = agent.rss_mb()
    backup_id = "bkp_" + secrets.token_hex(10)
    agent_backup, peak, report = agent.job("backup", backup_id=backup_id)
    (work / "untarred").mkdir()
    tar_restore = timed(["tar", "-xzf", str(tar_archive), "-C", str(work / "untarred")])
    shutil.rmtree(work / "untarred")
    agent_restore, _, _ = agent.job("restore", backup_id=backup_id, sha256=report["sha256"])

    def line(what: str, seconds: float) -> str:
        return f"{what:<16} {seconds:7.1f} s  {megabytes / seconds:7.1f} MB/s"

    print(line("tar -czf", tar_backup) + f"  archive {tar_archive.stat().st_size / 2**20:.0f} MB")
    print(line("agent backup", agent_backup) + f"  archive {report['size_bytes'] / 2**20:.0f} MB")
    print(f"backup ratio (agent / tar throughput): {tar_backup / agent_backup:.2f} (target 0.8)")
    print(line("tar -xzf", tar_restore))
    print(line("agent restore", agent_restore))
    print(f"restore ratio (agent / tar throughput): {tar_restore / agent_restore:.2f} (target 0.8)")
    print(f"agent memory: {at_rest:.0f} MB at rest, {peak:.0f} MB at most during the backup")


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


if __name__ == "__main__":
    main()
