"""A server's data moved between two real agents, the test playing the control plane: the
target expects it (a transfer token), the source sends it, the target commits it, the source
forgets it. Whatever fails, the data is whole on one side and only there."""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.agent.conftest import Agent
from tests.agent.lines import wait_until
from tests.agent.test_data_jobs import server_dir, stopped_demo
from tests.ports import free_port

BIG_FILE_MB = 64  # random bytes: the upload lasts long enough to kill an agent during it


def tree(directory: Path) -> dict[str, str]:
    """Every file under `directory` and the SHA-256 of its bytes."""
    found = {}
    for root, _dirs, files in os.walk(directory):
        for name in files:
            path = Path(root) / name
            found[str(path.relative_to(directory))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def new_token() -> str:
    return secrets.token_urlsafe(32)


def expect(target: Agent, server_id: str, token: str, seconds: int = 600) -> requests.Response:
    body = {"token": token, "game": "demo", "valid_seconds": seconds}
    return target.request("POST", f"/v1/transfers/{server_id}", body)


def send(source: Agent, server_id: str, target_url: str, token: str) -> requests.Response:
    body = {"target_url": target_url, "target_ca": source.ca.read_text(), "token": token}
    return requests.post(
        f"{source.url}/v1/servers/{server_id}/transfer",
        json=body,
        headers={"Authorization": f"Bearer {source.env['AGENT_TOKEN']}"},
        verify=str(source.ca),
        timeout=120,
    )


def commit(target: Agent, server_id: str) -> requests.Response:
    return target.request("POST", f"/v1/transfers/{server_id}/commit")


def staged(agent: Agent) -> list[str]:
    return sorted(os.listdir(agent.data_dir / "transfers"))


def wait_for_reports(control_plane: Any, server_id: str, kind: str, count: int) -> None:
    def reported() -> bool:
        return [r["kind"] for r in control_plane.reports_of(server_id)].count(kind) >= count

    wait_until(reported, timeout=20)


@pytest.fixture
def two_agents(make_agent: Any) -> tuple[Agent, Agent]:
    source, target = make_agent(), make_agent()
    source.start()
    target.start()
    return source, target


def with_big_file(source: Agent, server_id: str) -> dict[str, str]:
    with open(server_dir(source, server_id) / "region.bin", "wb") as big:
        for _ in range(BIG_FILE_MB):
            big.write(os.urandom(1024 * 1024))
    return tree(server_dir(source, server_id))


def test_it_moves_a_stopped_server_byte_for_byte_and_it_starts_on_the_target(
    two_agents, control_plane
):
    source, target = two_agents
    server_id = stopped_demo(source, control_plane)
    (server_dir(source, server_id) / "maps").mkdir()
    (server_dir(source, server_id) / "maps" / "island.txt").write_text("sand\n" * 1000)
    before, token = tree(server_dir(source, server_id)), new_token()

    assert expect(target, server_id, token).status_code == 201
    sent = send(source, server_id, target.url, token)
    assert sent.status_code == 200, sent.text
    assert not server_dir(target, server_id).exists()  # received, not the target's yet
    assert commit(target, server_id).status_code == 200
    assert source.request("DELETE", f"/v1/servers/{server_id}").status_code == 200

    assert tree(server_dir(target, server_id)) == before
    assert not server_dir(source, server_id).exists()
    assert not source.run_dir(server_id).exists()
    assert staged(source) == [] and staged(target) == []
    target.start_server(server_id=server_id)
    wait_for_reports(control_plane, server_id, "ready", 2)  # the first was the source's
    target.request("POST", f"/v1/servers/{server_id}/stop")  # its cgroup is the source's name
    wait_for_reports(control_plane, server_id, "halted", 2)


def test_an_upload_without_the_transfer_token_is_refused_and_nothing_is_kept(
    two_agents, control_plane
):
    source, target = two_agents
    server_id = stopped_demo(source, control_plane)
    expect(target, server_id, new_token())

    sent = send(source, server_id, target.url, new_token())  # not the one the target expects

    assert sent.status_code == 502
    assert "transfer token" in sent.json()["error"]["message"]
    assert staged(target) == [] and commit(target, server_id).status_code == 409
    assert tree(server_dir(source, server_id))


def test_the_node_token_is_not_a_transfer_token(two_agents, control_plane):
    source, target = two_agents
    server_id = stopped_demo(source, control_plane)
    expect(target, server_id, new_token())

    answer = requests.put(
        f"{target.url}/v1/transfers/{server_id}/archive",
        data=b"x" * 10,
        headers={"Authorization": f"Bearer {target.env['AGENT_TOKEN']}",
                 "X-Archive-SHA256": hashlib.sha256(b"x" * 10).hexdigest()},
        verify=str(target.ca),
        timeout=20,
    )  # fmt: skip

    assert answer.status_code == 401
    assert staged(target) == []


def test_an_archive_whose_sha256_differs_is_refused_and_nothing_is_kept(two_agents):
    _, target = two_agents
    server_id, token = "srv_" + secrets.token_hex(10), new_token()
    expect(target, server_id, token)

    answer = requests.put(
        f"{target.url}/v1/transfers/{server_id}/archive",
        data=b"not the archive that was hashed",
        headers={"Authorization": f"Bearer {token}", "X-Archive-SHA256": "0" * 64},
        verify=str(target.ca),
        timeout=20,
    )

    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "checksum_mismatch"
    assert staged(target) == [] and commit(target, server_id).status_code == 409


def test_a_target_that_is_down_fails_the_transfer_and_the_source_keeps_its_server(
    two_agents, control_plane
):
    source, _ = two_agents
    server_id = stopped_demo(source, control_plane)
    before = tree(server_dir(source, server_id))

    sent = send(source, server_id, f"https://127.0.0.1:{free_port()}", new_token())

    assert sent.status_code == 502
    assert sent.json()["error"]["code"] == "transfer_failed"
    assert tree(server_dir(source, server_id)) == before and staged(source) == []
    source.start_server(server_id=server_id)
    wait_for_reports(control_plane, server_id, "ready", 2)


def test_a_running_server_is_not_sent(two_agents, control_plane):
    source, target = two_agents
    server_id, _ = source.start_server()
    control_plane.wait_for_report(server_id, "ready")

    sent = send(source, server_id, target.url, new_token())

    assert sent.status_code == 409


def test_a_server_the_target_already_has_is_not_expected(two_agents, control_plane):
    _, target = two_agents
    server_id = stopped_demo(target, control_plane)

    assert expect(target, server_id, new_token()).status_code == 409


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A data directory on a 2 MiB tmpfs: a disk that fills up."""
    mount = Path(tempfile.mkdtemp(prefix="gshost-small-disk-", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    os.chmod(mount, 0o711)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)
    os.rmdir(mount)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small disk needs root")
def test_a_target_whose_disk_is_full_refuses_and_the_source_keeps_its_server(
    make_agent, control_plane, small_disk
):
    source, target = make_agent(), make_agent(small_disk)
    source.start()
    target.start()
    server_id = stopped_demo(source, control_plane)
    (server_dir(source, server_id) / "noise.bin").write_bytes(os.urandom(4 * 1024 * 1024))
    before, token = tree(server_dir(source, server_id)), new_token()
    expect(target, server_id, token)

    sent = send(source, server_id, target.url, token)

    assert sent.status_code == 502
    assert "disk is full" in sent.json()["error"]["message"]
    assert tree(server_dir(source, server_id)) == before
    assert staged(target) == [] and commit(target, server_id).status_code == 409


@contextlib.contextmanager
def in_background(call: Any, *args: Any) -> Iterator[Future[Any]]:
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool.submit(call, *args)


def kill_when_uploading(victim: Agent, target: Agent, server_id: str) -> None:
    """SIGKILL to `victim` once the target has some of the archive."""
    partial = target.data_dir / "transfers" / f"{server_id}.incoming.tar.gz"
    wait_until(lambda: partial.exists() and partial.stat().st_size > 0, timeout=60, interval=0.01)
    assert victim.process is not None
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait(timeout=10)


def test_a_target_killed_mid_upload_keeps_nothing_and_the_source_keeps_its_server(
    two_agents, control_plane
):
    source, target = two_agents
    server_id = stopped_demo(source, control_plane)
    before, token = with_big_file(source, server_id), new_token()
    expect(target, server_id, token)

    with in_background(send, source, server_id, target.url, token) as sending:
        kill_when_uploading(target, target, server_id)
        sent = sending.result(timeout=120)
    target.start()

    assert sent.status_code == 502
    assert tree(server_dir(source, server_id)) == before and staged(source) == []
    assert staged(target) == [] and not server_dir(target, server_id).exists()
    assert commit(target, server_id).status_code == 409


def test_a_source_killed_mid_upload_leaves_nothing_on_the_target_and_its_server_whole(
    two_agents, control_plane
):
    source, target = two_agents
    server_id = stopped_demo(source, control_plane)
    before, token = with_big_file(source, server_id), new_token()
    expect(target, server_id, token)

    with in_background(send, source, server_id, target.url, token) as sending:
        kill_when_uploading(source, target, server_id)
        with pytest.raises(requests.ConnectionError):
            sending.result(timeout=120)
    source.start()

    wait_until(lambda: staged(target) == [], timeout=20)
    assert commit(target, server_id).status_code == 409
    assert not server_dir(target, server_id).exists()
    assert tree(server_dir(source, server_id)) == before and staged(source) == []


class LyingTarget:
    """An HTTPS "agent" that takes an upload and answers 200 with what it is told to say,
    whatever it received (the red team's lying migration target)."""

    def __init__(self, certificates: dict[str, Path], answer: dict[str, Any]) -> None:
        import http.server
        import json
        import ssl
        import threading

        reply = json.dumps(answer).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                left = int(self.headers["Content-Length"])
                while left > 0:
                    left -= len(self.rfile.read(min(left, 1 << 16)))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certificates["cert"], certificates["key"])
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(
    "answer",
    [
        {"received": True},
        {"size_bytes": 1, "sha256": "0" * 64},
        {"size_bytes": None, "sha256": None},
    ],
)
def test_a_target_that_does_not_confirm_the_archive_fails_the_transfer(
    two_agents, control_plane, certificates, answer
):
    source, _ = two_agents
    server_id = stopped_demo(source, control_plane)
    before = tree(server_dir(source, server_id))
    target = LyingTarget(certificates, answer)
    try:
        sent = send(source, server_id, target.url, new_token())
    finally:
        target.close()
    assert sent.status_code == 502
    assert sent.json()["error"]["code"] == "transfer_failed"
    assert "differs from the archive sent" in sent.json()["error"]["message"]
    assert tree(server_dir(source, server_id)) == before and staged(source) == []


def test_a_migration_beyond_the_servers_disk_limit_is_refused_by_the_target(
    two_agents, control_plane
):
    source, target = two_agents
    server_id = stopped_demo(source, control_plane)
    with open(server_dir(source, server_id) / "hole.bin", "wb") as sparse:
        sparse.truncate(3 << 20)  # sparse: counted at its full size
    before = tree(server_dir(source, server_id))
    token = new_token()
    body = {"token": token, "game": "demo", "valid_seconds": 600, "disk_mb": 2}
    assert target.request("POST", f"/v1/transfers/{server_id}", body).status_code == 201

    sent = send(source, server_id, target.url, token)

    assert sent.status_code == 502
    assert "exceeds the server's disk limit (2 MB)" in sent.json()["error"]["message"]
    assert staged(target) == [] and commit(target, server_id).status_code == 409
    assert tree(server_dir(source, server_id)) == before
