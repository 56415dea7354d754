"""Who may import whom: the import-linter contracts in pyproject.toml hold for the code as it
is (docs/architecture.md explains each of them)."""

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
CONTROL_PLANE = ("accounts", "application", "audit", "gshost", "servers", "webhooks")


def test_it_keeps_every_import_contract() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_import_cycle_runs_through_two_apps() -> None:
    """The stated calls up (accounts to audit, accounts to servers) make cycles between apps,
    never between modules: what a call up reaches imports none of its callers."""
    graph = grimp.build_graph(*CONTROL_PLANE, cache_dir=None)
    closing = [
        (importer, imported)
        for importer in sorted(graph.modules)
        for imported in sorted(graph.find_modules_directly_imported_by(importer))
        if importer.split(".")[0] != imported.split(".")[0]
        and graph.find_shortest_chain(importer=imported, imported=importer) is not None
    ]
    assert closing == []
