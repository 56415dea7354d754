"""The file manager in Chromium against a real agent: a person browses a server's files, makes
a folder, uploads through the node's link, edits a text file, renames, compresses, unpacks,
downloads through a link, deletes, and reads the SFTP details."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect

from accounts.models import Membership
from audit.models import AuditRecord
from servers.models import Node, Server
from tests.browser.conftest import _page, sign_in
from tests.servers.test_files_api import certificates, games_dir, node, rig, server

__all__ = ["certificates", "games_dir", "node", "rig", "server"]  # the file API's fixtures

pytestmark = [
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture(name="files_page")
def files_page_fixture(
    browser: Browser, live_server: Any, request: pytest.FixtureRequest, alice: Membership
) -> Iterator[Page]:
    # The agent's certificate comes from the tests' own CA, which Chromium does not know.
    with _page(
        browser, live_server, request, ignore_https_errors=True, accept_downloads=True
    ) as page:
        sign_in(page, "alice@acme.test", "alice-pw-123")
        yield page


def test_a_person_manages_a_servers_files(
    files_page: Page, rig: dict[str, Any], server: Server, tmp_path: Path
) -> None:
    page = files_page
    Node.objects.filter(id=server.node_id).update(sftp_port=2022)  # as its heartbeat says
    on_disk = Path(rig["agent"].data_dir) / "servers" / server.id
    page.goto(f"/panel/servers/{server.id}/files/?path=/")
    expect(page.locator('[data-file="passwd"]')).to_contain_text("↪")  # a link, shown as one
    expect(page.locator("[data-sftp-username]")).to_have_text(f"alice@acme.test.{server.id}")

    page.fill("#new-folder", "mods")
    page.click("text=Make folder")
    page.click('[data-file="mods"] a')
    expect(page.locator("nav.crumbs")).to_contain_text("mods")

    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "b.txt").write_text("beta\n")
    page.set_input_files("#upload-files", [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")])
    page.click("text=Upload to /mods")
    expect(page.locator('[data-file="b.txt"]')).to_be_visible()
    assert (on_disk / "mods" / "a.txt").read_text() == "alpha\n"

    page.click('[data-file="a.txt"] >> text=Edit')
    page.fill("#file-content", "alpha, edited\n")
    page.click("text=Save")
    expect(page.get_by_text("Saved /mods/a.txt.")).to_be_visible()
    assert (on_disk / "mods" / "a.txt").read_text() == "alpha, edited\n"
    saved = AuditRecord.objects.get(action="files.write")
    assert (saved.source, saved.actor_email) == ("panel", "alice@acme.test")
    assert "/mods/a.txt" in saved.details

    page.select_option("#rename-from", "/mods/a.txt")
    page.fill("#rename-to", "c.txt")
    page.click("button:text('Rename')")
    expect(page.locator('[data-file="c.txt"]')).to_be_visible()

    page.check('[data-file="b.txt"] input[type=checkbox]')
    page.check('[data-file="c.txt"] input[type=checkbox]')
    page.fill("[data-archive-name]", "both.tar.gz")
    page.click("[data-compress]")
    expect(page.locator('[data-file="both.tar.gz"]')).to_be_visible()
    with tarfile.open(on_disk / "mods" / "both.tar.gz") as archive:
        assert sorted(archive.getnames()) == ["b.txt", "c.txt"]

    page.check('[data-file="b.txt"] input[type=checkbox]')
    page.check('[data-file="c.txt"] input[type=checkbox]')
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("[data-delete]")
    expect(page.locator('[data-file="c.txt"]')).to_have_count(0)

    page.click('[data-decompress="both.tar.gz"]')
    expect(page.locator('[data-file="c.txt"]')).to_be_visible()

    with page.expect_download() as download:
        page.click('[data-download="c.txt"]')
    assert Path(download.value.path()).read_text() == "alpha, edited\n"


def test_an_upload_that_cannot_reach_the_node_says_so_and_writes_nothing(
    files_page: Page, rig: dict[str, Any], server: Server, tmp_path: Path
) -> None:
    page = files_page
    node_host = urlsplit(server.node.url).netloc
    page.route(f"https://{node_host}/**", lambda route: route.abort("connectionrefused"))
    page.goto(f"/panel/servers/{server.id}/files/?path=/")

    (tmp_path / "lost.txt").write_text("never arrives\n")
    page.set_input_files("#upload-files", str(tmp_path / "lost.txt"))
    page.click("text=Upload to /")

    expect(page.locator("[data-upload-status]")).to_contain_text(
        f"Upload failed: the server's node ({node_host}) was not reached"
    )
    assert not (Path(rig["agent"].data_dir) / "servers" / server.id / "lost.txt").exists()


def test_a_node_that_serves_no_sftp_shows_no_sftp_address(
    files_page: Page, rig: dict[str, Any], server: Server
) -> None:
    Node.objects.filter(id=server.node_id).update(sftp_port=None)  # AGENT_SFTP_PORT=0
    files_page.goto(f"/panel/servers/{server.id}/files/?path=/")
    expect(files_page.locator("[data-sftp-off]")).to_be_visible()
    expect(files_page.locator("[data-sftp-address]")).to_have_count(0)
