"""The file routes of the public API (/servers/{id}/files…) against a real agent, whose hostile
game ("planter", a denylist of `*.key` and `private/`) has planted links in its directory: to
/etc/passwd, to the agent's data, to another server's directory, and up (`../../`).

One agent and one running game serve the module; each test works in a directory of its own.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from audit.models import AuditRecord
from gshost.encryption import encrypt_secret
from servers.api.files import CURSOR_PATTERN
from servers.fleet.nodes import NodeInput, node_create, token_hash
from servers.models import Node, Server
from tests.agent.conftest import (
    TOKEN,
    Agent,
    AgentFactory,
    ControlPlane,
    certificates,
    games_dir,
)
from tests.agent.lines import probe, wait_until
from tests.conftest import API, client_for, error_of
from tests.ports import free_port, free_port_range
from tests.servers.node_fixtures import beat

__all__ = ["certificates", "games_dir"]  # the agent tests' fixtures

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(os.geteuid() != 0, reason="the agent runs as root, as in production"),
]

DISK_MB = 24
EVERY_SCOPE = ["files:read", "files:write", "files:delete"]


class Site(BaseHTTPRequestHandler):
    """A web server on loopback: /file answers a file; /private redirects to 127.0.0.2 (not
    allowed); /hop/N redirects to /hop/N+1."""

    def do_GET(self) -> None:
        port = self.server.server_address[1]
        if self.path == "/file.txt":
            body = b"pulled content\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/private":
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.2:{port}/file.txt")
            self.end_headers()
        elif self.path.startswith("/hop/"):
            self.send_response(302)
            self.send_header("Location", f"/hop/{int(self.path.rsplit('/', 1)[1]) + 1}")
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def rig(certificates: dict[str, Path], games_dir: Path) -> Iterator[dict[str, Any]]:
    """The agent, the planter game running on it, and a neighbour's directory."""
    plane = ControlPlane(port=free_port())
    plane.up()
    factory = AgentFactory(certificates, games_dir, plane)
    agent = factory.make()
    agent.env["AGENT_PULL_ALLOWED_NETWORKS"] = "127.0.0.1/32"
    agent.start()
    neighbour_id, _ = agent.start_server("demo", disk_mb=DISK_MB)
    server_id, port = agent.start_server("planter", disk_mb=DISK_MB)
    wait_until(lambda: agent.state_of(server_id) == "running", timeout=30)
    neighbour = agent.data_dir / "servers" / neighbour_id
    wait_until(lambda: (neighbour / "server.properties").exists(), timeout=30)
    for target, name in (
        ("/etc/passwd", "passwd"),
        (str(agent.data_dir), "agent"),
        (str(neighbour), "neighbour"),
        ("../../", "up"),
    ):
        assert probe(agent, server_id, f"link {target} {name}") == "linked"
    yield {"agent": agent, "server_id": server_id, "port": port, "neighbour": neighbour}
    factory.clean_up()
    plane.down()


@pytest.fixture
def node(rig: dict[str, Any], certificates: dict[str, Path]) -> Node:
    agent: Agent = rig["agent"]
    created = node_create(
        data=NodeInput(
            name="files-node",
            url=agent.url,
            address="127.0.0.1",
            ports=free_port_range(2),
            ca_pem=certificates["ca"].read_text(),
        )
    )
    Node.objects.filter(id=created.node.id).update(
        encrypted_token=encrypt_secret(TOKEN), token_hash=token_hash(TOKEN), games=["planter"]
    )
    created.node.refresh_from_db()
    beat(created.node)
    return created.node


@pytest.fixture
def server(rig: dict[str, Any], node: Node, acme: Any) -> Server:
    return Server.objects.create(
        id=rig["server_id"], organization=acme, name="Planted", game="planter", node=node,
        port=rig["port"], state="running", disk_mb=DISK_MB,
    )  # fmt: skip


@pytest.fixture
def key(make_key: Any) -> Any:
    return make_key(EVERY_SCOPE)


@pytest.fixture
def home(rig: dict[str, Any], server: Server, key: Any, request: pytest.FixtureRequest) -> str:
    """A directory of this test's own in the server's files."""
    name = "/t-" + re.sub(r"[^A-Za-z0-9_-]", "-", request.node.name)[:60]
    answer = call(key, server, "post", "directory", {"path": name})
    assert answer.status_code == 201, answer.content
    return name


def host_dir(rig: dict[str, Any]) -> Path:
    return Path(rig["agent"].data_dir) / "servers" / rig["server_id"]


def call(key: Any, server: Server, method: str, action: str = "", body: Any = None,
         **query: str) -> Any:  # fmt: skip
    url = f"{API}/servers/{server.id}/files" + (f"/{action}" if action else "")
    client = client_for(key)
    if method == "put":
        return client.put(url + _query(query), body, content_type="text/plain")
    if method == "get":
        return client.get(url, query)
    return client.post(url, body, format="json")


def _query(query: dict[str, str]) -> str:
    from urllib.parse import urlencode

    return "?" + urlencode(query) if query else ""


def unchanged(rig: dict[str, Any]) -> None:
    assert "planted" not in Path("/etc/passwd").read_text()
    assert not (Path(rig["agent"].data_dir) / "planted").exists()
    assert not (rig["neighbour"] / "planted").exists()
    assert "planted" not in (rig["neighbour"] / "server.properties").read_text()


# The jail


def test_links_are_listed_as_links(rig: dict[str, Any], server: Server, key: Any) -> None:
    answer = call(key, server, "get", path="/")
    assert answer.status_code == 200
    types = {entry["name"]: entry["type"] for entry in answer.json()["results"]}
    assert {types[name] for name in ("passwd", "agent", "neighbour", "up")} == {"symlink"}


def test_a_link_to_a_file_is_not_read_written_or_archived(
    rig: dict[str, Any], server: Server, key: Any
) -> None:
    attempts = [
        call(key, server, "get", "content", path="/passwd"),
        call(key, server, "put", "content", b"planted", path="/passwd"),
        call(key, server, "post", "copy", {"path": "/passwd"}),
        call(key, server, "post", "download-link", {"path": "/passwd"}),
    ]
    for answer in attempts:
        assert answer.status_code == 403, answer.content
        assert error_of(answer)["code"] == "path_outside_server"
    unchanged(rig)


def test_a_link_is_archived_as_a_link(rig: dict[str, Any], server: Server, key: Any,
                                      home: str) -> None:  # fmt: skip
    archive = f"{home}/links.tar.gz"
    made = call(key, server, "post", "compress", {"paths": ["/passwd"], "archive": archive})
    assert made.status_code == 200, made.content
    with tarfile.open(host_dir(rig) / archive.lstrip("/")) as tar:
        (entry,) = tar.getmembers()
    assert entry.issym() and entry.linkname == "/etc/passwd" and entry.size == 0


@pytest.mark.parametrize("path", ["/agent/token", "/neighbour/server.properties", "/up/planted"])
def test_nothing_goes_through_a_link_to_a_directory(
    rig: dict[str, Any], server: Server, key: Any, path: str
) -> None:
    through = path.rsplit("/", 1)[0]
    attempts = [
        call(key, server, "get", "content", path=path),
        call(key, server, "put", "content", b"planted", path=f"{through}/planted"),
        call(key, server, "get", path=through),
        call(key, server, "post", "rename", {"from": path, "to": "/stolen"}),
        call(key, server, "post", "copy", {"path": path}),
        call(key, server, "post", "delete", {"paths": [path]}),
        call(key, server, "post", "directory", {"path": f"{through}/planted"}),
        call(key, server, "post", "compress", {"paths": [path], "archive": "/out.tar.gz"}),
        call(key, server, "post", "download-link", {"path": path}),
        call(key, server, "post", "upload-link", {"directory": through}),
    ]
    for answer in attempts:
        assert answer.status_code == 403, answer.content
        assert error_of(answer)["code"] == "path_outside_server"
    unchanged(rig)


def test_a_link_itself_is_deleted_not_its_target(rig: dict[str, Any], server: Server, key: Any,
                                                 home: str) -> None:  # fmt: skip
    os.symlink("/etc/passwd", host_dir(rig) / home.lstrip("/") / "doomed")
    answer = call(key, server, "post", "delete", {"paths": [f"{home}/doomed"]})
    assert answer.status_code == 200
    assert not os.path.lexists(host_dir(rig) / home.lstrip("/") / "doomed")
    assert Path("/etc/passwd").exists()


def test_paths_that_leave_the_root_are_invalid(server: Server, key: Any) -> None:
    for path in ("/../etc/passwd", "/a/\x00b", "/" + "a" * 4097):
        answer = call(key, server, "get", "content", path=path)
        assert answer.status_code == 400
        assert error_of(answer)["code"] == "invalid_path"


def test_a_nul_in_a_body_path_is_an_invalid_path(server: Server, key: Any) -> None:
    bodies = {
        "rename": {"from": "/a\x00b", "to": "/c"},
        "delete": {"paths": ["/a\x00b"]},
        "directory": {"path": "/a\x00b"},
        "compress": {"paths": ["/a"], "archive": "/a\x00b.tar.gz"},
        "download-link": {"path": "/a\x00b"},
    }
    for action, body in bodies.items():
        answer = call(key, server, "post", action, body)
        assert (answer.status_code, error_of(answer)["code"]) == (400, "invalid_path"), action


# Reading and writing


def test_a_written_file_reads_back_and_belongs_to_the_game_user(
    rig: dict[str, Any], server: Server, key: Any, home: str
) -> None:
    written = call(key, server, "put", "content", b"motd=hello\n", path=f"{home}/a.cfg")
    assert written.status_code == 200
    assert written.json()["type"] == "file" and written.json()["size"] == 11
    assert call(key, server, "get", "content", path=f"{home}/a.cfg").content == b"motd=hello\n"
    found = (host_dir(rig) / home.lstrip("/") / "a.cfg").stat()
    game_uid = host_dir(rig).stat().st_gid  # the server's own id: its directory's group
    assert (found.st_uid, found.st_gid) == (game_uid, game_uid)
    row = AuditRecord.objects.get(action="files.write")
    assert row.source == "api" and f'"{home}/a.cfg"' in row.details


def test_a_write_needs_its_parent(server: Server, key: Any, home: str) -> None:
    answer = call(key, server, "put", "content", b"x", path=f"{home}/missing/a.cfg")
    assert answer.status_code == 404
    assert error_of(answer)["code"] == "file_not_found"


def test_content_over_8_mib_is_refused(server: Server, key: Any, home: str) -> None:
    big = b"x" * (8 * 1024 * 1024 + 1)
    answer = call(key, server, "put", "content", big, path=f"{home}/big")
    assert answer.status_code == 413
    assert error_of(answer)["code"] == "file_too_large"


def test_listing_is_directories_first_and_paginated(server: Server, key: Any, home: str) -> None:
    for name in ("b.txt", "a.txt"):
        call(key, server, "put", "content", b"x", path=f"{home}/{name}")
    call(key, server, "post", "directory", {"path": f"{home}/zdir"})
    first = call(key, server, "get", path=home, limit="2")
    assert [e["name"] for e in first.json()["results"]] == ["zdir", "a.txt"]
    assert first.json()["results"][0]["mode"] == "0755"
    following = client_for(key).get(first.json()["next"])
    assert [e["name"] for e in following.json()["results"]] == ["b.txt"]
    assert following.json()["next"] is None
    assert call(key, server, "get", path=f"{home}/a.txt").json()["error"]["code"] == (
        "not_a_directory"
    )


def test_rename_copy_and_delete(server: Server, key: Any, home: str) -> None:
    call(key, server, "put", "content", b"x", path=f"{home}/one")
    renamed = call(key, server, "post", "rename", {"from": f"{home}/one", "to": f"{home}/two"})
    assert renamed.status_code == 200 and renamed.json()["path"] == f"{home}/two"
    copied = call(key, server, "post", "copy", {"path": f"{home}/two"})
    assert copied.json()["path"] == f"{home}/two copy"
    deleted = call(key, server, "post", "delete", {"paths": [f"{home}/two", f"{home}/two copy"]})
    assert deleted.json() == {"deleted": [f"{home}/two", f"{home}/two copy"]}
    assert call(key, server, "get", path=home).json()["results"] == []


# Denylist, disk limit, archives


def test_the_denylist_holds(rig: dict[str, Any], server: Server, key: Any, home: str) -> None:
    (host_dir(rig) / home.lstrip("/") / "secret.key").write_text("kept")
    attempts = [
        call(key, server, "get", "content", path=f"{home}/secret.key"),
        call(key, server, "put", "content", b"x", path=f"{home}/new.key"),
        call(key, server, "post", "rename", {"from": f"{home}/secret.key", "to": f"{home}/x"}),
        call(key, server, "post", "delete", {"paths": [f"{home}/secret.key"]}),
        call(key, server, "post", "directory", {"path": f"{home}/private"}),
    ]
    for answer in attempts:
        assert answer.status_code == 403, answer.content
        assert error_of(answer)["code"] == "file_denied"
    assert (host_dir(rig) / home.lstrip("/") / "secret.key").read_text() == "kept"


def tar_gz(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            info.size = len(data) if data is not None else 0
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, **fields: Any) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for field, value in fields.items():
        setattr(info, field, value)
    return info


def test_hostile_archives_are_refused_before_anything_is_written(
    rig: dict[str, Any], server: Server, key: Any, home: str
) -> None:
    hostile = {
        "dotdot": [(member("../../planted"), b"x")],
        "absolute": [(member("/etc/planted"), b"x")],
        "link-out": [(member("out", tarfile.SYMTYPE, linkname="/etc/passwd"), None)],
        "device": [(member("null", tarfile.CHRTYPE, devmajor=1, devminor=3), None)],
    }
    for name, members in hostile.items():
        call(key, server, "put", "content", tar_gz([(member("ok"), b"x"), *members]),
             path=f"{home}/{name}.tar.gz")  # fmt: skip
        body = {"archive": f"{home}/{name}.tar.gz", "directory": f"{home}/{name}"}
        answer = call(key, server, "post", "decompress", body)
        assert answer.status_code == 400, (name, answer.content)
        assert error_of(answer)["code"] == "invalid_archive"
        assert not (host_dir(rig) / home.lstrip("/") / name / "ok").exists()
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("../../planted", b"x")
    call(key, server, "put", "content", zipped.getvalue(), path=f"{home}/bad.zip")
    answer = call(key, server, "post", "decompress", {"archive": f"{home}/bad.zip",
                                                      "directory": home})  # fmt: skip
    assert error_of(answer)["code"] == "invalid_archive"
    unchanged(rig)


def test_setuid_bits_are_dropped_and_archives_round_trip(
    rig: dict[str, Any], server: Server, key: Any, home: str
) -> None:
    archive = tar_gz([(member("bin/tool", mode=0o4755), b"#!/bin/sh\n")])
    call(key, server, "put", "content", archive, path=f"{home}/tool.tar.gz")
    done = call(key, server, "post", "decompress",
                {"archive": f"{home}/tool.tar.gz", "directory": f"{home}/out"})  # fmt: skip
    assert done.status_code == 200, done.content
    tool = host_dir(rig) / home.lstrip("/") / "out" / "bin" / "tool"
    assert tool.stat().st_mode & 0o7777 == 0o755
    made = call(key, server, "post", "compress",
                {"paths": [f"{home}/out"], "archive": f"{home}/again.tar.gz"})  # fmt: skip
    assert made.status_code == 200, made.content
    with tarfile.open(host_dir(rig) / home.lstrip("/") / "again.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["out", "out/bin", "out/bin/tool"]


def test_the_disk_limit_holds_for_writes_and_extraction(
    rig: dict[str, Any], server: Server, key: Any, home: str
) -> None:
    five_mib = os.urandom(5 * 1024 * 1024)
    answers = [
        call(key, server, "put", "content", five_mib, path=f"{home}/fill-{n}") for n in range(6)
    ]
    assert [a.status_code for a in answers][:3] == [200, 200, 200]
    refused = [a for a in answers if a.status_code != 200]
    assert refused and error_of(refused[0])["code"] == "disk_limit_exceeded"
    for n in range(6):
        call(key, server, "post", "delete", {"paths": [f"{home}/fill-{n}"]})
    bomb = tar_gz([(member(f"part-{n}"), b"\0" * (8 * 1024 * 1024)) for n in range(4)])
    call(key, server, "put", "content", bomb, path=f"{home}/bomb.tar.gz")
    answer = call(key, server, "post", "decompress",
                  {"archive": f"{home}/bomb.tar.gz", "directory": f"{home}/bomb"})  # fmt: skip
    assert answer.status_code == 409
    assert error_of(answer)["code"] == "disk_limit_exceeded"
    assert not (host_dir(rig) / home.lstrip("/") / "bomb" / "part-0").exists()


# Pulls


def test_pulls_reach_only_allowed_addresses(
    rig: dict[str, Any], server: Server, key: Any, home: str, site: str
) -> None:
    pulled = call(key, server, "post", "pull", {"url": f"{site}/file.txt", "path": home})
    assert pulled.status_code == 200, pulled.content
    assert (host_dir(rig) / home.lstrip("/") / "file.txt").read_bytes() == b"pulled content\n"
    refusals = {
        f"{site}/private": "private_address",  # a redirect to a loopback address not allowed
        "http://10.1.2.3/x": "private_address",
        "http://[::1]/x": "private_address",
        f"{site}/hop/0": "too_many_redirects",
        "ftp://example.com/x": "scheme_not_allowed",
    }
    for url, reason in refusals.items():
        answer = call(key, server, "post", "pull", {"url": url, "path": f"{home}/x"})
        assert answer.status_code == 422, (url, answer.content)
        assert error_of(answer)["reason"] == reason
    assert not (host_dir(rig) / home.lstrip("/") / "x").exists()
    answers = [
        call(key, server, "post", "pull", {"url": f"{site}/file.txt", "path": f"{home}/{n}"})
        for n in range(10)
    ]
    limited = [a for a in answers if a.status_code == 429]
    assert limited and int(limited[0]["Retry-After"]) > 0  # at most 10 a server in 5 minutes
    assert error_of(limited[0])["code"] == "rate_limited"


# Links


def test_a_download_link_streams_once(rig: dict[str, Any], server: Server, key: Any,
                                      home: str) -> None:  # fmt: skip
    call(key, server, "put", "content", b"world data", path=f"{home}/world.dat")
    link = call(key, server, "post", "download-link", {"path": f"{home}/world.dat"}).json()
    assert link["url"].startswith(rig["agent"].url + "/v1/file-links/")
    ca = str(rig["agent"].ca)
    first = requests.get(link["url"], verify=ca, timeout=10)
    assert first.content == b"world data"
    assert 'filename="world.dat"' in first.headers["Content-Disposition"]
    assert requests.get(link["url"], verify=ca, timeout=10).status_code == 404
    assert AuditRecord.objects.filter(action="files.download").count() == 1


def test_every_answer_of_a_link_may_be_read_by_the_panels_page(rig: dict[str, Any]) -> None:
    ca = str(rig["agent"].ca)
    for method in ("get", "post"):
        refused = requests.request(method, rig["agent"].url + "/v1/file-links/unknown", verify=ca,
                                   timeout=10)  # fmt: skip
        assert refused.status_code == 404
        assert refused.headers["Access-Control-Allow-Origin"] == "*"
    other = requests.get(rig["agent"].url + "/v1/node", verify=ca, timeout=10)
    assert "Access-Control-Allow-Origin" not in other.headers


def test_an_upload_link_takes_several_files_once(rig: dict[str, Any], server: Server, key: Any,
                                                 home: str) -> None:  # fmt: skip
    link = call(key, server, "post", "upload-link", {"directory": home}).json()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", link["expires_at"])
    files = [("files", ("a.txt", b"alpha")), ("files", ("b.txt", b"beta"))]
    ca = str(rig["agent"].ca)
    answer = requests.post(link["url"], files=files, verify=ca, timeout=10)
    assert answer.status_code == 201, answer.text
    assert (host_dir(rig) / home.lstrip("/") / "b.txt").read_bytes() == b"beta"
    again = requests.post(link["url"], files=files, verify=ca, timeout=10)
    assert again.status_code == 404


# Who may


def test_scopes_are_per_operation(server: Server, make_key: Any) -> None:
    reader = make_key(["files:read"])
    answer = call(reader, server, "put", "content", b"x", path="/x")
    assert answer.status_code == 403
    assert error_of(answer)["required_scope"] == "files:write"
    answer = call(reader, server, "post", "delete", {"paths": ["/x"]})
    assert error_of(answer)["required_scope"] == "files:delete"


def test_a_suspended_server_refuses_its_files(server: Server, key: Any) -> None:
    from django.utils import timezone

    Server.objects.filter(id=server.id).update(suspended_at=timezone.now())
    answer = call(key, server, "get", path="/")
    assert answer.status_code == 409
    assert error_of(answer)["code"] == "server_suspended"


def test_a_silent_node_is_node_unavailable(server: Server, node: Node, key: Any) -> None:
    Node.objects.filter(id=node.id).update(last_heartbeat_at=None)
    answer = call(key, server, "get", path="/")
    assert answer.status_code == 503
    assert error_of(answer)["code"] == "node_unavailable"


def test_another_organizations_server_is_not_found(server: Server, make_key: Any,
                                                   charlie: Any) -> None:  # fmt: skip
    outsider = make_key(EVERY_SCOPE, membership=charlie)
    answer = call(outsider, server, "get", path="/")
    assert answer.status_code == 404
    assert error_of(answer)["code"] == "server_not_found"


def test_a_listing_limit_is_checked_and_clamped(server: Server, key: Any) -> None:
    for bad in ("0", "-1", "two", "²"):
        answer = call(key, server, "get", path="/", limit=bad)
        assert answer.status_code == 400
        assert error_of(answer)["code"] == "invalid_request"
    assert call(key, server, "get", path="/", limit="5000").status_code == 200
    assert call(key, server, "get", path="/", limit="9" * 5000).status_code == 200


def test_reading_over_8_mib_needs_a_download_link(
    rig: dict[str, Any], server: Server, key: Any, home: str
) -> None:
    (host_dir(rig) / home.lstrip("/") / "world.dat").write_bytes(b"\0" * (8 * 1024 * 1024 + 1))
    answer = call(key, server, "get", "content", path=f"{home}/world.dat")
    assert answer.status_code == 413
    assert error_of(answer)["code"] == "file_too_large"


def test_a_listings_cursor_has_the_shape_the_schema_states(
    server: Server, key: Any, home: str
) -> None:
    for name in ("a.txt", "b.txt"):
        call(key, server, "put", "content", b"x", path=f"{home}/{name}")
    next_page = call(key, server, "get", path=home, limit="1").json()["next"]
    cursor = parse_qs(urlsplit(next_page).query)["cursor"][0]
    assert re.fullmatch(CURSOR_PATTERN, cursor)


def test_a_forged_cursor_is_invalid_request(server: Server, key: Any) -> None:
    answer = call(key, server, "get", path="/", cursor="bm90IGEgY3Vyc29y")  # "not a cursor"
    assert answer.status_code == 400
    assert error_of(answer)["code"] == "invalid_request"
