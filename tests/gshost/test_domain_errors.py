"""One convention for refusals: an app's `errors.py` holds only domain errors, and the modules
that hold business rules refuse with them, never with a plain ValueError, Exception or a
model's DoesNotExist (the edges could not tell a client which refusal it was)."""

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from gshost.errors import DomainError

ROOT = Path(__file__).resolve().parent.parent.parent
APPS = ("accounts", "audit", "servers", "webhooks")

ERROR_MODULES = ["gshost.errors", *(f"{app}.errors" for app in APPS)]


def domain_error_names(tree: ast.Module) -> set[str]:
    """The names a module imports from an errors module: each is a domain error (the test
    below holds every errors module to that)."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in ERROR_MODULES
        for alias in node.names
    }


def rule_modules() -> list[Path]:
    """Every module that refuses with a domain error: it imports one and raises something."""
    found = []
    for app in (*APPS, "gshost"):
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts or path.name == "errors.py":
                continue
            tree = ast.parse(path.read_text())
            raises = any(isinstance(node, ast.Raise) for node in ast.walk(tree))
            if raises and domain_error_names(tree):
                found.append(path)
    return found


PLAIN_ERRORS = {"ValueError", "Exception"}


def plain_raises(source: str) -> list[str]:
    """`raise` statements of ValueError, Exception or `<Model>.DoesNotExist`, as source text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        plain = isinstance(raised, ast.Name) and raised.id in PLAIN_ERRORS
        missing = isinstance(raised, ast.Attribute) and raised.attr == "DoesNotExist"
        if plain or missing:
            found.append(ast.unparse(node))
    return found


@pytest.mark.parametrize("module_name", ERROR_MODULES)
def test_every_class_in_an_errors_module_is_a_domain_error(module_name):
    module = importlib.import_module(module_name)
    defined = [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module_name
    ]
    assert defined
    assert [cls.__name__ for cls in defined if not issubclass(cls, DomainError)] == []


@pytest.mark.parametrize("path", rule_modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_rule_module_raises_a_plain_error(path):
    assert plain_raises(path.read_text()) == []


def test_the_glob_finds_the_rule_modules_of_every_app():
    found = {str(path.relative_to(ROOT)) for path in rule_modules()}
    assert {
        "accounts/services.py",
        "servers/jobs.py",
        "servers/nodes.py",
        "webhooks/targets/url_safety.py",
        "webhooks/health/stats.py",
    } <= found


def test_the_scan_finds_each_plain_raise():
    source = (
        "raise ValueError('bad')\n"
        "raise Exception\n"
        "raise ApiKey.DoesNotExist('gone')\n"
        "raise KeyNotFound()\n"
    )
    assert plain_raises(source) == [
        "raise ValueError('bad')",
        "raise Exception",
        "raise ApiKey.DoesNotExist('gone')",
    ]
