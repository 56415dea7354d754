"""The file layer's rules that need no agent: pull addresses, single-use links, zip members."""

from __future__ import annotations

import io
import os
import stat
import zipfile
from pathlib import Path

import pytest

from gshost_agent.files import archives
from gshost_agent.files.jail import Jail
from gshost_agent.files.links import LINK_SECONDS, FileLinks
from gshost_agent.files.pull import Addresses, PullRefused
from gshost_agent.withdrawals import Withdrawal, Withdrawals


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/x", "private_address"),
        ("http://[::1]/x", "private_address"),
        ("http://169.254.169.254/latest/meta-data", "private_address"),
        ("http://10.0.0.8/x", "private_address"),
        ("http://[::ffff:192.168.1.1]/x", "private_address"),
        ("http://localhost/x", "private_address"),
        ("http://metadata.google.internal/x", "private_address"),
        ("http://intranet/x", "private_address"),
        ("file:///etc/passwd", "scheme_not_allowed"),
        ("gopher://example.com/", "scheme_not_allowed"),
        ("http://user@example.com/", "malformed_url"),
        ("http://exa mple.com/", "malformed_url"),
    ],
)
def test_a_pull_never_aims_at_a_private_address(url: str, reason: str) -> None:
    with pytest.raises(PullRefused) as refused:
        Addresses().check_url(url)
    assert refused.value.reason == reason


def test_public_addresses_and_names_may_be_pulled() -> None:
    Addresses().check_url("https://8.8.8.8/file")
    Addresses().check_url("https://example.com/mods/pack.zip")
    assert not Addresses().reachable("127.0.0.1")
    assert Addresses(["127.0.0.1/32"]).reachable("127.0.0.1")


def test_a_link_is_used_once_and_only_for_its_kind() -> None:
    links = FileLinks()
    token, _ = links.issue("srv_a", "download", "/world.dat", "demo", 100)
    assert links.take(token, "upload") is None
    taken = links.take(token, "download")
    assert taken is not None and taken.path == "/world.dat"
    assert links.take(token, "download") is None


def test_a_link_expires_after_15_minutes() -> None:
    now = [1_000.0]
    links = FileLinks(clock=lambda: now[0])
    token, link = links.issue("srv_a", "upload", "/", "demo", 100)
    assert link.expires_at == 1_000.0 + LINK_SECONDS
    now[0] += LINK_SECONDS
    assert links.take(token, "upload") is None


def test_links_and_devices_in_a_zip_are_dropped_or_refused(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mods/a.txt", b"alpha")
        link = zipfile.ZipInfo("mods/out")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
        tool = zipfile.ZipInfo("mods/tool")
        tool.external_attr = (stat.S_IFREG | 0o4777) << 16
        archive.writestr(tool, b"#!/bin/sh\n")
    (tmp_path / "pack.zip").write_bytes(buffer.getvalue())
    jail = Jail(tmp_path)
    written = archives.extract(jail, "/pack.zip", "/", 1 << 30)
    assert sorted(written) == ["/mods/a.txt", "/mods/tool"]
    assert not os.path.lexists(tmp_path / "mods" / "out")
    assert stat.S_IMODE((tmp_path / "mods" / "tool").stat().st_mode) == 0o755

    device = io.BytesIO()
    with zipfile.ZipFile(device, "w") as archive:
        node = zipfile.ZipInfo("null")
        node.external_attr = (stat.S_IFCHR | 0o666) << 16
        archive.writestr(node, b"")
    (tmp_path / "device.zip").write_bytes(device.getvalue())
    with pytest.raises(archives.InvalidArchive):
        archives.extract(jail, "/device.zip", "/dev-out", 1 << 30)


def test_an_archive_larger_than_the_room_left_writes_nothing(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("big", b"\0" * (4 << 20))
    (tmp_path / "big.zip").write_bytes(buffer.getvalue())
    with pytest.raises(archives.DiskFull):
        archives.extract(Jail(tmp_path), "/big.zip", "/out", 1 << 20)
    assert not (tmp_path / "out" / "big").exists()


def test_a_link_made_before_its_server_was_suspended_is_refused() -> None:
    now = [1_000.0]
    withdrawals = Withdrawals(clock=lambda: now[0])
    links = FileLinks(withdrawals=withdrawals, clock=lambda: now[0])
    token, _ = links.issue("srv_a", "download", "/world.dat", "demo", 100)
    kept, _ = links.issue("srv_b", "download", "/world.dat", "demo", 100)
    now[0] += 1
    withdrawals.add(Withdrawal(reason="suspended", server_ids=frozenset({"srv_a"}), at=now[0]))
    assert links.take(token, "download") is None
    assert links.take(kept, "download") is not None
