"""The wheel carries every package, migration, template and static file, and a console script;
installed, it keeps its settings file and database in the directory it runs from."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("gshost", "accounts", "audit", "servers", "webhooks")
_NOT_SOURCES = shutil.ignore_patterns(
    ".venv",
    ".git",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "staticfiles",
    "db.sqlite3*",
    "tests",
    "bench",
    "docs",
    ".*_cache",
)


@pytest.fixture(scope="module", name="wheel")
def wheel_fixture(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """Builds from a copy, so no stale build/ directory of the checkout can leak into it."""
    workdir = tmp_path_factory.mktemp("wheel")
    source = workdir / "src"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCES)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(workdir / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (built,) = (workdir / "dist").glob("gshost-*.whl")
    return zipfile.ZipFile(built)


def _repo_files(top: str, suffix: str = "") -> set[str]:
    return {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / top).rglob(f"*{suffix}")
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_it_ships_every_python_module_of_the_apps(wheel):
    names = set(wheel.namelist())
    expected = set().union(*(_repo_files(app, ".py") for app in APPS))
    assert expected - names == set()


def test_it_ships_every_migration(wheel):
    migrations = {n for n in wheel.namelist() if "/migrations/0001_initial.py" in n}
    assert migrations == {f"{app}/migrations/0001_initial.py" for app in APPS[1:]}


def test_it_ships_the_templates_inside_the_gshost_package(wheel):
    expected = {f"gshost/{name}" for name in _repo_files("templates")}
    assert expected and expected - set(wheel.namelist()) == set()


def test_it_ships_the_static_files_inside_the_gshost_package(wheel):
    expected = {f"gshost/{name}" for name in _repo_files("static")}
    assert expected and expected - set(wheel.namelist()) == set()


def test_it_declares_the_gshost_console_script(wheel):
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "[console_scripts]" in text
    assert "gshost = gshost.__main__:main" in text


def test_it_ships_the_node_agent_with_its_game_templates(wheel):
    names = set(wheel.namelist())
    expected = _repo_files("gshost_agent", ".py") | _repo_files("gshost_agent/games", ".toml")
    assert expected - names == set()


def test_it_declares_the_agent_and_demo_game_console_scripts(wheel):
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "gshost-agent = gshost_agent.__main__:main" in text
    assert "gshost-demo-game = gshost_agent.demo_game:main" in text
    assert "gshost-play = gshost_agent.play:main" in text


def test_it_ships_no_tests_or_benchmarks(wheel):
    assert not [n for n in wheel.namelist() if n.startswith(("tests/", "bench/"))]


def test_it_runs_django_commands_through_python_dash_m_gshost():
    result = subprocess.run(
        [sys.executable, "-m", "gshost", "check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_installed_it_reads_the_env_file_and_keeps_the_database_where_it_runs(wheel, tmp_path):
    site = tmp_path / "site-packages"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q"]
    subprocess.run(
        [*pip, "--target", str(site), str(wheel.filename)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / ".env").write_text("DEBUG=true\nSECRET_KEY=" + "k" * 50 + "\n")
    settings_from_elsewhere = {
        "SECRET_KEY",
        "DEBUG",
        "ENV_FILE",
        "PROJECT_DIR",
        "DATABASE_URL",
        "REDIS_URL",
        "STATIC_ROOT",
        "DJANGO_SETTINGS_MODULE",
    }
    env = {name: value for name, value in os.environ.items() if name not in settings_from_elsewhere}
    result = subprocess.run(
        [sys.executable, "-m", "gshost", "migrate", "--noinput", "-v0"],
        cwd=project,
        env={**env, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (project / "db.sqlite3").is_file()
    assert list(site.rglob("db.sqlite3*")) == []
