"""One home per fixture: the shared cast and its clients live in tests/conftest.py, and no test
module defines a fixture of the same name (which would shadow it for that module only)."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def fixtures_defined(path: Path) -> set[str]:
    return {
        node.name
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef)
        and any("fixture" in ast.unparse(decorator) for decorator in node.decorator_list)
    }


def test_no_test_module_redefines_a_shared_fixture():
    shared = fixtures_defined(TESTS / "conftest.py")
    redefined = {
        str(path.relative_to(TESTS)): sorted(fixtures_defined(path) & shared)
        for path in sorted(TESTS.rglob("*.py"))
        if path != TESTS / "conftest.py" and fixtures_defined(path) & shared
    }
    assert redefined == {}


def test_the_scan_reads_fixtures_with_and_without_arguments(tmp_path):
    module = tmp_path / "test_x.py"
    module.write_text(
        "import pytest\n"
        "@pytest.fixture\ndef alice_client(): ...\n"
        "@pytest.fixture(scope='module')\ndef world(): ...\n"
        "def helper(): ...\n"
    )
    assert fixtures_defined(module) == {"alice_client", "world"}
