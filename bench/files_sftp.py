"""Benchmark: SFTP upload and download through the agent, against OpenSSH's sftp-server.
bench/files.py runs it after its own parts; it also runs alone.

A real `gshost-agent` (as root: its files are the server's own uid's, on the server's own
filesystem) serves SFTP; its logins are answered by the stand-in control plane of
tests/agent/control_plane.py. The baseline is Debian's OpenSSH: an sshd this script starts on
a free port in a temporary directory, with `Subsystem sftp /usr/lib/openssh/sftp-server`
(scripts/ensure-sshd.sh installs it). The same client (asyncssh, its default block size and
parallel requests) moves the same file to and from each, interleaved, BENCH_ROUNDS rounds;
the medians are compared. Goal: the agent at least 0.5x OpenSSH's throughput either way.

    python bench/files_sftp.py            # 1 GiB, BENCH_ROUNDS=3
    python bench/files_sftp.py --small    # 64 MiB (a quick check)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncssh
import trustme

from tests.agent.control_plane import ControlPlane

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "gsn_" + "b" * 43
SERVER_ID = "srv_benchsftp0000000000"
PASSWORD = "bench-pw"
SSHD = Path("/usr/sbin/sshd")
SFTP_SERVER = Path("/usr/lib/openssh/sftp-server")
MIB = 1 << 20
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


def login_answer(body: dict[str, object]) -> tuple[int, dict[str, object]]:
    if body.get("password") != PASSWORD:
        return 403, {"error": {"code": "sftp_login_refused"}}
    return 200, {
        "person_id": "1", "email": "bench@example.com", "server_id": SERVER_ID,
        "scopes": ["files:read", "files:write", "files:delete"], "ssh_key_id": None,
        "server": {"game": "demo", "disk_mb": 4096},
    }  # fmt: skip


def start_agent(work: Path, plane: ControlPlane, sftp_port: int) -> subprocess.Popen[bytes]:
    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(str(work / "cert.pem"))
    issued.private_key_pem.write_to_path(str(work / "key.pem"))
    env = {
        "PATH": os.environ["PATH"],
        "AGENT_TOKEN": TOKEN,
        "AGENT_CONTROL_URL": plane.url,
        "AGENT_DATA_DIR": str(work / "agent"),
        "AGENT_BIND": f"127.0.0.1:{free_port()}",
        "AGENT_TLS_CERT": str(work / "cert.pem"),
        "AGENT_TLS_KEY": str(work / "key.pem"),
        "AGENT_SFTP_PORT": str(sftp_port),
        "AGENT_NETWORK_POOL": "0",
    }
    agent = subprocess.Popen(
        [sys.executable, "-m", "gshost_agent", "--stop-servers-on-exit"],
        env=env, cwd=ROOT, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_for(lambda: listening(sftp_port), 60, "the agent's SFTP")
    return agent


def start_sshd(work: Path, port: int) -> tuple[subprocess.Popen[bytes], asyncssh.SSHKey]:
    """An sshd of our own: its host key, one authorized client key, sftp-server only."""
    home = work / "sshd"
    home.mkdir(mode=0o700)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / "host")],
                   check=True)  # fmt: skip
    client = asyncssh.generate_private_key("ssh-ed25519")
    (home / "authorized_keys").write_bytes(client.export_public_key("openssh"))
    (home / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {home / 'host'}\n"
        f"AuthorizedKeysFile {home / 'authorized_keys'}\nPidFile {home / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\n"
        f"Subsystem sftp {SFTP_SERVER}\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation directory
    sshd = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(home / "sshd_config")],
                            stderr=subprocess.DEVNULL)  # fmt: skip
    wait_for(lambda: listening(port), 20, "sshd")
    return sshd, client


async def transfer(port: int, credentials: dict[str, object], local: Path, remote: str,
                   upload: bool) -> float:  # fmt: skip
    """Seconds one whole-file transfer took (the connection made before the clock starts)."""
    async with (
        asyncssh.connect("127.0.0.1", port, known_hosts=None, **credentials) as connection,
        connection.start_sftp_client() as sftp,
    ):
        began = time.perf_counter()
        if upload:
            await sftp.put(str(local), remote)
        else:
            await sftp.get(remote, str(local))
        took = time.perf_counter() - began
        await sftp.remove(remote) if not upload else None
    return took


def bench_sftp(base: Path, megabytes: int) -> bool:
    """Both servers, interleaved, in `base`; prints the table; whether the goal was met."""
    if os.geteuid() != 0 or not SSHD.exists() or not SFTP_SERVER.exists():
        print("SFTP: skipped (run as root, after scripts/ensure-sshd.sh)")
        return False
    size = megabytes * MIB
    work = Path(tempfile.mkdtemp(prefix="sftp-", dir=base))
    os.chmod(base, 0o711)
    os.chmod(work, 0o711)
    source = work / "source.bin"
    block = os.urandom(MIB)  # incompressible, and SSH compresses nothing by default anyway
    with source.open("wb") as file:
        for _ in range(megabytes):
            file.write(block)
    plane = ControlPlane(port=free_port(), token=TOKEN)
    plane.sftp_auth = login_answer
    plane.up()
    agent_port, sshd_port = free_port(), free_port()
    agent = start_agent(work, plane, agent_port)
    sshd, client_key = start_sshd(work, sshd_port)
    ours = {"username": f"bench@example.com.{SERVER_ID}", "password": PASSWORD,
            "client_keys": None}  # fmt: skip
    theirs = {"username": "root", "client_keys": [client_key]}
    remote_dir = work / "openssh-files"
    remote_dir.mkdir()
    seconds: dict[str, list[float]] = {name: [] for name in ("up-agent", "up-ssh", "down-agent",
                                                               "down-ssh")}  # fmt: skip
    try:
        for _ in range(ROUNDS):
            for name, port, credentials, remote in (
                ("agent", agent_port, ours, "/bench.bin"),
                ("ssh", sshd_port, theirs, str(remote_dir / "bench.bin")),
            ):
                seconds[f"up-{name}"].append(
                    asyncio.run(transfer(port, credentials, source, remote, upload=True))
                )
                back = work / f"back-{name}.bin"
                seconds[f"down-{name}"].append(
                    asyncio.run(transfer(port, credentials, back, remote, upload=False))
                )
                assert back.stat().st_size == size
                back.unlink()
    finally:
        for process in (sshd, agent):
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        plane.down()
        subprocess.run(["umount", "-R", str(work / "agent" / "servers" / SERVER_ID)],
                       stderr=subprocess.DEVNULL, check=False)  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)
    return report(size, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="64 MiB instead of 1 GiB")
    base = Path(tempfile.mkdtemp(prefix="gshost-bench-sftp-", dir="/tmp"))
    try:
        met = bench_sftp(base, 64 if parser.parse_args().small else 1024)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    sys.exit(0 if met else 1)


def report(size: int, seconds: dict[str, list[float]]) -> bool:
    rate = {name: size / MIB / statistics.median(taken) for name, taken in seconds.items()}
    print(f"\nSFTP, {size // MIB} MiB, median of {ROUNDS} rounds (asyncssh client)")
    missed = []
    for way in ("up", "down"):
        ratio = rate[f"{way}-agent"] / rate[f"{way}-ssh"]
        label = "upload  " if way == "up" else "download"
        print(f"  {label} agent {rate[f'{way}-agent']:7.1f} MiB/s   OpenSSH sftp-server "
              f"{rate[f'{way}-ssh']:7.1f} MiB/s   ratio {ratio:.2f}x (goal >= 0.5x)")  # fmt: skip
        if ratio < 0.5:
            missed.append(label.strip())
    print("MISSED: " + ", ".join(missed) if missed else "Goal met.")
    return not missed


if __name__ == "__main__":
    main()
