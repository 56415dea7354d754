"""The jailed file layer over a hostile server directory: links to /etc/passwd, to the agent's
data and to another server's directory, planted as a game would. Each rule holds with openat2
and with the descriptor walk that stands in for it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gshost_agent.files.jail import (
    DirectoryNotEmpty,
    FileDenied,
    FileExists,
    FileNotFound,
    Jail,
    NotADirectory,
    NotAFile,
    PathInvalid,
    PathOutside,
    normalize,
)

UID = 399_311  # a server's own id: no user of the machine has it
OTHER_UID = 399_312


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def hostile(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, object]:
    data = tmp_path / "data"
    servers = data / "servers"
    mine, other = servers / "srv_mine", servers / "srv_other"
    for directory, number in ((mine, UID), (other, OTHER_UID)):
        directory.mkdir(parents=True)
        os.chown(directory, 0, number)
        os.chmod(directory, 0o770)
    (data / "token").write_text("agent secret")
    (other / "world.dat").write_text("theirs")
    os.chown(other / "world.dat", OTHER_UID, OTHER_UID)
    (mine / "config").mkdir()
    (mine / "config" / "server.cfg").write_text("port=1\n")
    (mine / "secret.key").write_text("key")
    for name, target in (
        ("passwd", "/etc/passwd"),
        ("agent", str(data)),
        ("neighbour", str(other)),
        ("up", "../../"),
        ("inside", "config"),
    ):
        os.symlink(target, mine / name)
    os.symlink("/etc", mine / "config" / "etc")
    for path in mine.rglob("*"):
        os.lchown(path, UID, UID)
    jail = Jail(mine, uid=UID, gid=UID, denylist=["*.key", "private/"], use_openat2=request.param)
    return {"jail": jail, "mine": mine, "other": other, "data": data}


def unchanged(hostile: dict[str, object]) -> None:
    data, other = hostile["data"], hostile["other"]
    assert isinstance(data, Path) and isinstance(other, Path)
    assert (data / "token").read_text() == "agent secret"
    assert (other / "world.dat").read_text() == "theirs"
    assert sorted(path.name for path in other.iterdir()) == ["world.dat"]
    assert Path("/etc/passwd").stat().st_uid == 0


LINKED = ["/passwd", "/agent/token", "/neighbour/world.dat", "/up/token", "/config/etc/passwd"]


def test_paths_are_normalized_and_may_not_leave_the_root() -> None:
    assert normalize("//a/./b/../c/") == "/a/c"
    assert normalize("/") == "/"
    for bad in ("/../etc", "/a/../../b", "/a\x00b", "/" + "a" * 4097):
        with pytest.raises(PathInvalid):
            normalize(bad)


@pytest.mark.parametrize("path", LINKED)
def test_nothing_is_read_through_a_link(hostile: dict[str, object], path: str) -> None:
    jail = hostile["jail"]
    assert isinstance(jail, Jail)
    with pytest.raises(PathOutside):
        jail.open_read(path)
    unchanged(hostile)


@pytest.mark.parametrize("path", LINKED)
def test_nothing_is_written_through_a_link(hostile: dict[str, object], path: str) -> None:
    jail = hostile["jail"]
    assert isinstance(jail, Jail)
    for atomic in (True, False):
        with pytest.raises(PathOutside), jail.open_write(path, atomic=atomic) as file:
            file.write(b"owned")
    unchanged(hostile)


@pytest.mark.parametrize("path", ["/agent", "/neighbour", "/up", "/config/etc"])
def test_a_link_to_a_directory_is_not_listed_through(hostile: dict[str, object], path: str) -> None:
    jail = hostile["jail"]
    assert isinstance(jail, Jail)
    with pytest.raises(PathOutside):
        jail.list(path)


def test_links_are_listed_as_links_directories_first(hostile: dict[str, object]) -> None:
    jail = hostile["jail"]
    assert isinstance(jail, Jail)
    entries = jail.list("/")
    assert [(entry.name, entry.type) for entry in entries] == [
        ("config", "directory"),
        ("agent", "symlink"),
        ("inside", "symlink"),
        ("neighbour", "symlink"),
        ("passwd", "symlink"),
        ("secret.key", "file"),
        ("up", "symlink"),
    ]
    assert entries[0].to_json()["type"] == "directory"
    assert entries[3].to_json()["size"] == len(str(hostile["other"]))


def test_deleting_links_removes_the_links_only(hostile: dict[str, object]) -> None:
    jail, mine = hostile["jail"], hostile["mine"]
    assert isinstance(jail, Jail) and isinstance(mine, Path)
    for name in ("/passwd", "/agent", "/neighbour", "/up"):
        jail.delete(name)
        assert not os.path.lexists(mine / name.lstrip("/"))
    unchanged(hostile)


def test_a_recursive_delete_never_leaves_the_directory(hostile: dict[str, object]) -> None:
    jail, mine = hostile["jail"], hostile["mine"]
    assert isinstance(jail, Jail) and isinstance(mine, Path)
    jail.delete("/config")
    assert not (mine / "config").exists()
    assert Path("/etc/passwd").exists()
    with pytest.raises(PathOutside):
        jail.delete("/agent/token")
    unchanged(hostile)


@pytest.mark.parametrize("path", ["/passwd", "/neighbour", "/agent"])
def test_chmod_never_follows_a_link(hostile: dict[str, object], path: str) -> None:
    jail = hostile["jail"]
    assert isinstance(jail, Jail)
    before = Path("/etc/passwd").stat().st_mode
    with pytest.raises(PathOutside):
        jail.chmod(path, 0o777)
    with pytest.raises(PathOutside):
        jail.chmod(path + "/x", 0o777)
    assert Path("/etc/passwd").stat().st_mode == before
    unchanged(hostile)


def test_renames_never_go_through_a_link(hostile: dict[str, object]) -> None:
    jail, mine = hostile["jail"], hostile["mine"]
    assert isinstance(jail, Jail) and isinstance(mine, Path)
    with pytest.raises(PathOutside):
        jail.rename("/config/server.cfg", "/neighbour/server.cfg")
    with pytest.raises(PathOutside):
        jail.rename("/neighbour/world.dat", "/stolen.dat")
    moved = jail.rename("/passwd", "/renamed-link")  # the link itself moves
    assert moved.type == "symlink"
    assert os.readlink(mine / "renamed-link") == "/etc/passwd"
    unchanged(hostile)


def test_copy_and_mkdir_through_a_link_fail(hostile: dict[str, object]) -> None:
    jail = hostile["jail"]
    assert isinstance(jail, Jail)
    with pytest.raises(PathOutside):
        jail.copy("/passwd")
    with pytest.raises(PathOutside):
        jail.copy("/agent/token")
    with pytest.raises(PathOutside):
        jail.mkdir("/neighbour/new")
    unchanged(hostile)


def test_even_a_link_inside_is_not_followed(hostile: dict[str, object]) -> None:
    jail = hostile["jail"]
    assert isinstance(jail, Jail)
    with pytest.raises(PathOutside):
        jail.open_read("/inside/server.cfg")


def test_what_is_written_belongs_to_the_game_user(hostile: dict[str, object]) -> None:
    jail, mine = hostile["jail"], hostile["mine"]
    assert isinstance(jail, Jail) and isinstance(mine, Path)
    groups = os.getgroups()
    with jail.open_write("/config/new.cfg", atomic=True) as file:
        file.write(b"fresh")
    jail.mkdir("/a/b/c", parents=True)
    copied = jail.copy("/config")
    for path in (mine / "config" / "new.cfg", mine / "a" / "b" / "c", mine / copied.path[1:]):
        found = path.stat()
        assert (found.st_uid, found.st_gid) == (UID, UID)
    assert (mine / "config" / "new.cfg").read_bytes() == b"fresh"
    assert copied.path == "/config copy"
    assert (mine / "config copy" / "server.cfg").read_text() == "port=1\n"
    assert os.getgroups() == groups  # the thread's own credentials are back
    (mine / "mine-as-root").touch()
    assert (mine / "mine-as-root").stat().st_uid == 0


def test_an_atomic_write_shows_the_old_content_until_it_is_closed(
    hostile: dict[str, object],
) -> None:
    jail, mine = hostile["jail"], hostile["mine"]
    assert isinstance(jail, Jail) and isinstance(mine, Path)
    target = mine / "config" / "server.cfg"
    file = jail.open_write("/config/server.cfg", atomic=True)
    file.write(b"port=2\n")
    assert target.read_text() == "port=1\n"
    file.close()
    assert target.read_text() == "port=2\n"
    broken = jail.open_write("/config/server.cfg", atomic=True)
    with pytest.raises(RuntimeError), broken:
        broken.write(b"half")
        raise RuntimeError
    assert target.read_text() == "port=2\n"
    assert sorted(path.name for path in (mine / "config").iterdir()) == ["etc", "server.cfg"]


def test_a_file_the_game_may_not_write_is_refused(hostile: dict[str, object]) -> None:
    jail, mine = hostile["jail"], hostile["mine"]
    assert isinstance(jail, Jail) and isinstance(mine, Path)
    (mine / "root-owned.cfg").write_text("kept")
    os.chmod(mine / "root-owned.cfg", 0o644)
    with pytest.raises(FileDenied):
        jail.open_write("/root-owned.cfg")
    assert (mine / "root-owned.cfg").read_text() == "kept"


def test_the_denylist_holds_for_every_operation(hostile: dict[str, object]) -> None:
    jail, mine = hostile["jail"], hostile["mine"]
    assert isinstance(jail, Jail) and isinstance(mine, Path)
    (mine / "private").mkdir()
    os.chown(mine / "private", UID, UID)
    attempts = [
        lambda: jail.open_read("/secret.key"),
        lambda: jail.open_write("/new.key"),
        lambda: jail.rename("/secret.key", "/plain.txt"),
        lambda: jail.rename("/config/server.cfg", "/server.key"),
        lambda: jail.delete("/secret.key"),
        lambda: jail.chmod("/secret.key", 0o600),
        lambda: jail.list("/private"),
        lambda: jail.mkdir("/private/inner"),
    ]
    for attempt in attempts:
        with pytest.raises(FileDenied):
            attempt()
    (mine / "config" / "nested.key").write_text("x")
    with pytest.raises(FileDenied):  # the directory holds a denied file
        jail.delete("/config")
    with pytest.raises(FileDenied):
        jail.rename("/config", "/moved")
    assert (mine / "secret.key").read_text() == "key"
    assert (mine / "config" / "nested.key").exists()


def test_a_fifo_is_never_opened(hostile: dict[str, object]) -> None:
    jail, mine = hostile["jail"], hostile["mine"]
    assert isinstance(jail, Jail) and isinstance(mine, Path)
    os.mkfifo(mine / "pipe")
    with pytest.raises(NotAFile):
        jail.open_read("/pipe")


def test_errors_name_what_went_wrong(hostile: dict[str, object]) -> None:
    jail = hostile["jail"]
    assert isinstance(jail, Jail)
    with pytest.raises(FileNotFound):
        jail.stat("/missing")
    with pytest.raises(NotADirectory):
        jail.list("/config/server.cfg")
    with pytest.raises(FileExists):
        jail.rename("/config/server.cfg", "/config")
    with pytest.raises(DirectoryNotEmpty):
        jail.rmdir("/config")
    with pytest.raises(PathInvalid):
        jail.delete("/")
    with pytest.raises(PathInvalid):
        jail.rename("/config", "/config/inner")


def test_chmod_drops_setuid_bits(hostile: dict[str, object]) -> None:
    jail, mine = hostile["jail"], hostile["mine"]
    assert isinstance(jail, Jail) and isinstance(mine, Path)
    jail.chmod("/config/server.cfg", 0o4755)
    assert stat.S_IMODE((mine / "config" / "server.cfg").stat().st_mode) == 0o755


@pytest.mark.parametrize("use_openat2", [True, False], ids=["openat2", "walk"])
def test_a_folder_cannot_be_renamed_to_where_the_denylist_names_its_files(
    tmp_path: Path, use_openat2: bool
) -> None:
    mine = tmp_path / "srv_mine"
    (mine / "notes").mkdir(parents=True)
    (mine / "notes" / "plan.txt").write_text("the plan")
    for path in (mine, *mine.rglob("*")):
        os.chown(path, UID, UID)
    jail = Jail(mine, uid=UID, gid=UID, denylist=["secret/*.txt"], use_openat2=use_openat2)

    with pytest.raises(FileDenied):
        jail.rename("/notes", "/secret")
    assert (mine / "notes" / "plan.txt").exists() and not (mine / "secret").exists()
    assert jail.rename("/notes", "/public").type == "directory"
