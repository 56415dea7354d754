"""Benchmark: a server's migration between two real local agents, against `cp -r` of the same
bytes in the same run.

Makes a world of BENCH_MIGRATION_MB megabytes (default 200) in a server's directory on the
source agent (half random bytes, half repetitive records, as bench/agent_backups.py), then:

- `cp -r` of that directory to another directory of the same disk, timed;
- the migration's agent part, timed from the first request to the last answer: the target
  expects the server (a transfer token), the source archives its directory and uploads it
  over HTTPS (the target hashes, checks and extracts it), the target adopts it, the source
  removes its copy. The control plane's own part is a transaction and does not show here.

Prints both times, the throughputs and the ratio (migration over copy), and checks that the
target's files are the source's, byte for byte.
"""

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from agent_backups import TOKEN, Agent, make_world

from tests.processes import unmount_under

WORLD_MB = int(os.environ.get("BENCH_MIGRATION_MB", "200"))
SERVER_ID = "srv_benchmigration000001"


def call(agent: Agent, method: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"https://127.0.0.1:{agent.port}{path}",
        data=json.dumps(body or {}).encode(),
        method=method,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=agent.tls, timeout=600) as answer:
        return dict(json.loads(answer.read()))


def tree(directory: Path) -> dict[str, str]:
    found = {}
    for root, _dirs, files in os.walk(directory):
        for name in files:
            path = Path(root) / name
            with open(path, "rb") as data:
                found[str(path.relative_to(directory))] = hashlib.file_digest(
                    data, "sha256"
                ).hexdigest()
    return found


def migrate(source: Agent, target: Agent, target_ca: str) -> float:
    token = secrets.token_urlsafe(32)
    began = time.monotonic()
    call(target, "POST", f"/v1/transfers/{SERVER_ID}", {"token": token, "game": "demo",
                                                         "valid_seconds": 600})  # fmt: skip
    send = {"target_url": f"https://127.0.0.1:{target.port}", "target_ca": target_ca,
            "token": token}  # fmt: skip
    call(source, "POST", f"/v1/servers/{SERVER_ID}/transfer", send)
    print(f"  archived, sent, checked and extracted: {time.monotonic() - began:.2f} s")
    call(target, "POST", f"/v1/transfers/{SERVER_ID}/commit")
    call(source, "DELETE", f"/v1/servers/{SERVER_ID}")
    return time.monotonic() - began


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="gshost-bench-migration-", dir="/tmp"))
    os.chmod(work, 0o711)
    (work / "source").mkdir()
    (work / "target").mkdir()
    source, target = Agent(work / "source"), Agent(work / "target")
    try:
        call(source, "PUT", f"/v1/servers/{SERVER_ID}/settings", {"game": "demo", "settings": {}})
        world = source.data / "servers" / SERVER_ID
        make_world(world, WORLD_MB)
        subprocess.run(["sync"], check=True)
        before = tree(world)

        began = time.monotonic()
        subprocess.run(["cp", "-r", str(world), str(work / "copy")], check=True)
        subprocess.run(["sync"], check=True)
        copy_seconds = time.monotonic() - began

        migration_seconds = migrate(source, target, (work / "target" / "ca.pem").read_text())
        moved = target.data / "servers" / SERVER_ID
        if tree(moved) != before or world.exists():
            raise SystemExit("the target's files are not the source's, or the source kept its")
        print(f"world: {WORLD_MB} MB")
        print(f"cp -r:     {copy_seconds:6.2f} s  {WORLD_MB / copy_seconds:7.1f} MB/s")
        print(f"migration: {migration_seconds:6.2f} s  {WORLD_MB / migration_seconds:7.1f} MB/s")
        print(f"migration / cp -r: {migration_seconds / copy_seconds:.1f}x the time")
    finally:
        source.end()
        target.end()
        unmount_under(work)  # the servers' filesystems of agents it killed
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
