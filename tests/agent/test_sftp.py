"""SFTP on a real agent, with asyncssh as the client: every operation goes through the jail,
whatever links a hostile game planted; scopes per operation; the denylist; the disk limit;
sessions ended by a withdrawal. The control plane's side of logins is the stand-in's answer
here (the real route: tests/servers/test_sftp_auth.py and test_sftp_end_to_end.py)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import asyncssh
import pytest

from gshost_agent.sftp.host_key import fingerprint, host_key
from gshost_agent.withdrawals import Withdrawal
from tests.agent.conftest import Agent, AgentFactory, new_server_id
from tests.agent.control_plane import ControlPlane
from tests.agent.lines import probe, wait_until
from tests.ports import free_port

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the agent sandboxes as root")

ALL_SCOPES = ["files:read", "files:write", "files:delete"]
PASSWORD = "right-pw"
_T = TypeVar("_T")


def run(work: Callable[[asyncssh.SFTPClient], Awaitable[_T]], agent: Agent, user: str) -> _T:
    async def session() -> _T:
        async with (
            asyncssh.connect(
                "127.0.0.1",
                int(agent.env["AGENT_SFTP_PORT"]),
                username=user,
                password=PASSWORD,
                client_keys=None,
                known_hosts=None,
            ) as connection,
            connection.start_sftp_client() as sftp,
        ):
            return await work(sftp)

    return asyncio.run(session())


def refused(work: Callable[[asyncssh.SFTPClient], Awaitable[Any]], agent: Agent, user: str) -> str:
    """The SFTP error `work` ended with (it must end with one)."""

    async def attempt(sftp: asyncssh.SFTPClient) -> str:
        try:
            await work(sftp)
        except asyncssh.SFTPError as error:
            return f"{type(error).__name__}: {error.reason}"
        raise AssertionError("the operation was not refused")

    return run(attempt, agent, user)


class Logins:
    """The stand-in control plane's answers: accepted for the servers given, else 403."""

    def __init__(self, plane: ControlPlane) -> None:
        self.asked: list[dict[str, Any]] = []
        self.servers: dict[str, dict[str, Any]] = {}
        plane.sftp_auth = self.answer

    def allow(self, server_id: str, *, scopes: list[str] = ALL_SCOPES, game: str = "hostile",
              disk_mb: int = 64, person_id: str = "7") -> str:  # fmt: skip
        self.servers[server_id] = {"scopes": scopes, "game": game, "disk_mb": disk_mb,
                                   "person_id": person_id}  # fmt: skip
        return f"alice@acme.test.{server_id}"

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.asked.append(body)
        server_id = body["username"].rpartition(".")[2]
        given = self.servers.get(server_id)
        if given is None or body.get("password") != PASSWORD:
            return 403, {"error": {"code": "sftp_login_refused"}}
        return 200, {
            "person_id": given["person_id"],
            "email": "alice@acme.test",
            "server_id": server_id,
            "scopes": given["scopes"],
            "ssh_key_id": None,
            "server": {"game": given["game"], "disk_mb": given["disk_mb"]},
        }


@pytest.fixture(scope="module")
def sftp_agent(
    certificates: dict[str, Path], games_dir: Path, module_control_plane: ControlPlane
) -> Iterator[Agent]:
    factory = AgentFactory(certificates, games_dir, module_control_plane)
    agent = factory.make()
    agent.env["AGENT_SFTP_PORT"] = str(free_port())
    agent.start()
    yield agent
    factory.clean_up()


@pytest.fixture(scope="module")
def logins(module_control_plane: ControlPlane) -> Logins:
    return Logins(module_control_plane)


@pytest.fixture(scope="module")
def victims() -> Iterator[Path]:
    """Files outside every server directory, in a directory anyone could write."""
    directory = Path(tempfile.mkdtemp(prefix="gshost-sftp-victim-", dir="/tmp"))
    os.chmod(directory, 0o777)
    (directory / "victim.txt").write_text("untouched\n")
    os.chmod(directory / "victim.txt", 0o666)
    (directory / "empty").mkdir(mode=0o777)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def hostile(sftp_agent: Agent, logins: Logins, victims: Path) -> dict[str, str]:
    """A hostile game that planted links out of its directory: to /etc/passwd, to the agent's
    host key, to another server's directory, to a directory anyone can write."""
    other = sftp_agent.data_dir / "servers" / new_server_id()
    other.mkdir()
    (other / "world.dat").write_text("another server's world\n")
    server_id, _ = sftp_agent.start_server("hostile", disk_mb=64)
    sftp_agent.wait_for_console(server_id, "^ready$")
    for target, name in [
        ("/etc/passwd", "passwd"),
        (str(sftp_agent.data_dir / "sftp" / "host_key"), "host_key"),
        (str(other), "neighbour"),
        (str(victims), "out"),
        (str(victims / "victim.txt"), "victim"),
    ]:
        assert probe(sftp_agent, server_id, f"link {target} {name}") == "linked"
    assert probe(sftp_agent, server_id, "put mine.txt") == "written"
    return {"server_id": server_id, "user": logins.allow(server_id), "other": str(other)}


def fingerprints(*paths: Path) -> list[tuple[str, int]]:
    found = []
    for path in paths:
        for item in sorted(path.rglob("*")) if path.is_dir() else [path]:
            data = item.read_bytes() if item.is_file() else b""
            found.append((hashlib.sha256(data).hexdigest(), item.stat().st_mode))
    return found


THROUGH_LINKS: dict[str, Callable[[asyncssh.SFTPClient], Awaitable[Any]]] = {
    "read /etc/passwd": lambda sftp: sftp.open("/passwd", "rb"),
    "read the host key": lambda sftp: sftp.open("/host_key", "rb"),
    "read through a directory link": lambda sftp: sftp.open("/out/victim.txt", "rb"),
    "write over a link": lambda sftp: sftp.open("/victim", "wb"),
    "write through a directory link": lambda sftp: sftp.open("/out/new.txt", "wb"),
    "list another server": lambda sftp: sftp.listdir("/neighbour"),
    "list a directory link": lambda sftp: sftp.listdir("/out"),
    "stat through a link": lambda sftp: sftp.stat("/out/victim.txt"),
    "stat a link": lambda sftp: sftp.stat("/passwd"),
    "delete through a link": lambda sftp: sftp.remove("/out/victim.txt"),
    "delete another server's file": lambda sftp: sftp.remove("/neighbour/world.dat"),
    "rmdir through a link": lambda sftp: sftp.rmdir("/out/empty"),
    "rename out of a link": lambda sftp: sftp.rename("/out/victim.txt", "/stolen.txt"),
    "rename into a link": lambda sftp: sftp.rename("/mine.txt", "/out/mine.txt"),
    "chmod a link": lambda sftp: sftp.chmod("/passwd", 0o777),
    "chmod through a link": lambda sftp: sftp.chmod("/out/victim.txt", 0o777),
    "truncate over a link": lambda sftp: sftp.truncate("/victim", 0),
    "make a symbolic link": lambda sftp: sftp.symlink("/etc/shadow", "/shadow"),
    "make a hard link": lambda sftp: sftp.link("/mine.txt", "/hard"),
}


@pytest.mark.parametrize("operation", list(THROUGH_LINKS))
def test_nothing_goes_through_a_planted_link(sftp_agent, hostile, victims, operation):
    outside = [Path("/etc/passwd"), sftp_agent.data_dir / "sftp", Path(hostile["other"]), victims]
    before = fingerprints(*outside)
    reason = refused(THROUGH_LINKS[operation], sftp_agent, hostile["user"])
    assert reason.startswith("SFTPPermissionDenied"), reason
    assert fingerprints(*outside) == before
    assert (victims / "empty").is_dir()
    assert not (victims / "new.txt").exists() and not (victims / "mine.txt").exists()


def test_links_are_listed_as_links_and_their_own_files_are_served(sftp_agent, hostile):
    async def look(sftp: asyncssh.SFTPClient) -> tuple[dict[str, int], bytes]:
        names = {entry.filename: entry.attrs.type for entry in await sftp.readdir("/")}
        async with sftp.open("/mine.txt", "rb") as file:
            return names, await file.read()

    names, content = run(look, sftp_agent, hostile["user"])
    assert names["passwd"] == asyncssh.FILEXFER_TYPE_SYMLINK
    assert names["out"] == asyncssh.FILEXFER_TYPE_SYMLINK
    assert content == b"secret\n"


def test_writes_belong_to_the_servers_user(sftp_agent, hostile):
    async def write(sftp: asyncssh.SFTPClient) -> None:
        await sftp.mkdir("/uploads")
        async with sftp.open("/uploads/mod.jar", "wb") as file:
            await file.write(b"x" * 100_000)
        await sftp.rename("/uploads/mod.jar", "/uploads/mod-1.jar")

    run(write, sftp_agent, hostile["user"])
    directory = sftp_agent.data_dir / "servers" / hostile["server_id"]
    written = directory / "uploads" / "mod-1.jar"
    assert written.stat().st_size == 100_000
    assert written.stat().st_uid == (directory / "mine.txt").stat().st_uid != 0


def test_each_change_is_reported_for_the_audit_and_a_refused_one_is_not(
    sftp_agent, hostile, logins, module_control_plane
):
    server_id = hostile["server_id"]
    reader = logins.allow(server_id, scopes=["files:read"], person_id="8")
    refused(lambda s: s.mkdir("/not-made"), sftp_agent, reader)
    logins.allow(server_id)  # as before, for the other tests

    async def change(sftp: asyncssh.SFTPClient) -> None:
        await sftp.mkdir("/audited")
        async with sftp.open("/audited/a.txt", "wb") as file:
            await file.write(b"alpha")
        async with sftp.open("/audited/a.txt", "rb") as file:  # a read is no change
            await file.read()
        await sftp.rename("/audited/a.txt", "/audited/b.txt")
        await sftp.remove("/audited/b.txt")
        await sftp.rmdir("/audited")

    run(change, sftp_agent, hostile["user"])

    def these() -> list[tuple[str, list[str]]] | None:
        """This test's changes, once all five are in: the outbox sends in order, so a report
        of the refused one would be in by then too."""
        reports = module_control_plane.reports_of(server_id)
        found = [
            (r["change"], r["paths"])
            for r in reports
            if r["kind"] == "files_changed" and r["paths"][0].startswith(("/audited", "/not-made"))
        ]
        return found if len(found) >= 5 else None

    assert wait_until(these) == [
        ("files.directory", ["/audited"]),
        ("files.write", ["/audited/a.txt"]),
        ("files.rename", ["/audited/a.txt", "/audited/b.txt"]),
        ("files.delete", ["/audited/b.txt"]),
        ("files.delete", ["/audited"]),
    ]


def test_the_agent_asks_the_control_plane_with_the_clients_address(sftp_agent, hostile, logins):
    run(lambda sftp: sftp.listdir("/"), sftp_agent, hostile["user"])
    asked = logins.asked[-1]
    assert asked["username"] == hostile["user"]
    assert asked["client_address"] == "127.0.0.1"


def test_a_refused_login_gets_no_session(sftp_agent, hostile):
    with pytest.raises(asyncssh.PermissionDenied):
        run(lambda sftp: sftp.listdir("/"), sftp_agent, f"alice@acme.test.{new_server_id()}")


def test_each_operation_needs_its_scope(sftp_agent, hostile, logins):
    server_id = hostile["server_id"]
    reader = logins.allow(server_id, scopes=["files:read"], person_id="8")
    assert "files:write" in refused(lambda s: s.open("/new.txt", "wb"), sftp_agent, reader)
    assert "files:write" in refused(lambda s: s.mkdir("/dir"), sftp_agent, reader)
    assert "files:write" in refused(lambda s: s.chmod("/mine.txt", 0o600), sftp_agent, reader)
    assert "files:delete" in refused(lambda s: s.remove("/mine.txt"), sftp_agent, reader)
    assert run(lambda s: s.listdir("/"), sftp_agent, reader)
    logins.allow(server_id)  # as before, for the other tests


def test_the_denylist_holds_over_sftp(sftp_agent, logins):
    server_id, _ = sftp_agent.start_server("planter", disk_mb=64)  # denies *.key, private/
    sftp_agent.wait_for_console(server_id, "^ready$")
    assert probe(sftp_agent, server_id, "put server.key") == "written"
    user = logins.allow(server_id, game="planter")
    assert "file_denied" in refused(lambda s: s.open("/server.key", "rb"), sftp_agent, user)
    assert "file_denied" in refused(lambda s: s.open("/new.key", "wb"), sftp_agent, user)
    assert "file_denied" in refused(lambda s: s.mkdir("/private"), sftp_agent, user)
    assert "file_denied" in refused(lambda s: s.remove("/server.key"), sftp_agent, user)


def test_a_write_past_the_disk_limit_fails(sftp_agent, hostile):
    async def fill(sftp: asyncssh.SFTPClient) -> None:
        async with sftp.open("/big.bin", "wb") as file:
            for _ in range(80):  # MiB, on a 64 MiB filesystem
                await file.write(b"\0" * (1 << 20))

    assert "disk_limit_exceeded" in refused(fill, sftp_agent, hostile["user"])
    run(lambda sftp: sftp.remove("/big.bin"), sftp_agent, hostile["user"])


def test_a_file_the_page_cache_no_longer_holds_is_read_whole(sftp_agent, hostile):
    data = os.urandom(3 << 20)

    async def write(sftp: asyncssh.SFTPClient) -> None:
        async with sftp.open("/cold.bin", "wb") as file:
            await file.write(data)

    run(write, sftp_agent, hostile["user"])
    on_disk = sftp_agent.data_dir / "servers" / hostile["server_id"] / "cold.bin"
    with on_disk.open("rb") as file:
        os.fsync(file.fileno())
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # out of the page cache

    async def read(sftp: asyncssh.SFTPClient) -> bytes:
        async with sftp.open("/cold.bin", "rb") as file:
            return bytes(await file.read())

    assert run(read, sftp_agent, hostile["user"]) == data
    run(lambda sftp: sftp.remove("/cold.bin"), sftp_agent, hostile["user"])


def test_df_shows_the_servers_disk_and_what_is_left(sftp_agent, hostile):
    async def write_then_look(sftp: asyncssh.SFTPClient) -> Any:
        async with sftp.open("/eight.bin", "wb") as file:
            await file.write(b"\1" * (8 << 20))
        return await sftp.statvfs("/")

    disk = run(write_then_look, sftp_agent, hostile["user"])
    run(lambda sftp: sftp.remove("/eight.bin"), sftp_agent, hostile["user"])

    assert disk.frsize * disk.blocks == 64 << 20
    assert 48 << 20 < disk.frsize * disk.bavail <= 56 << 20


@pytest.mark.parametrize(
    "names",
    [{"person_ids": frozenset({"7"})}, {"server_ids": None}],
    ids=["the person (a password change)", "the server (suspended, deleted, moved)"],
)
def test_a_withdrawal_ends_the_open_session_it_covers(sftp_agent, hostile, names):
    if "server_ids" in names:
        names = {"server_ids": frozenset({hostile["server_id"]})}
    withdrawal = Withdrawal(reason="withdrawn", **names)

    async def held(sftp: asyncssh.SFTPClient) -> str:
        await sftp.listdir("/")
        answer = await asyncio.to_thread(
            sftp_agent.request, "POST", "/v1/withdrawals", withdrawal.to_json()
        )
        assert answer.status_code == 200, answer.text
        try:
            for _ in range(100):  # 5 s
                await sftp.listdir("/")
                await asyncio.sleep(0.05)
        except (asyncssh.SFTPError, asyncssh.Error, OSError) as error:
            return type(error).__name__
        return "still open"

    assert run(held, sftp_agent, hostile["user"]) != "still open"


def test_the_host_key_is_kept_private_reported_and_the_one_offered(
    sftp_agent, module_control_plane
):
    key_file = sftp_agent.data_dir / "sftp" / "host_key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    kept = host_key(key_file.parent)  # what a later start reads: this key, not a new one
    reported = wait_until(lambda: module_control_plane.heartbeats[-1:], 15)[0]["sftp"]
    assert reported == {"port": int(sftp_agent.env["AGENT_SFTP_PORT"]),
                        "fingerprint": fingerprint(kept)}  # fmt: skip

    async def connect() -> None:
        trusted = ([kept.convert_to_public()], [], [])  # only this host key is trusted
        async with asyncssh.connect(
            "127.0.0.1", reported["port"], username="nobody", password="wrong",
            known_hosts=trusted, client_keys=None,
        ):  # fmt: skip
            pass

    with pytest.raises(asyncssh.PermissionDenied):  # past the host key, refused at the login
        asyncio.run(connect())
