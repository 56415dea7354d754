"""One convention for refusals, held in every product module of the apps and the core (not
only in those that already import a domain error): each error class is a `DomainError`, and
no module raises a plain ValueError, Exception or RuntimeError, or a model's DoesNotExist (the
edges could not tell a client which refusal it was). The agent (`gshost_agent`, no Django) is
a program of its own with its own errors, and is not scanned."""

import ast
import importlib
import inspect
from pathlib import Path

import pytest
from django.db.models import Model

from gshost.api.errors import ErrorCode
from gshost.errors import DomainError

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("accounts", "application", "audit", "servers", "webhooks", "gshost")

ERROR_MODULES = ["gshost.errors", *(f"{app}.errors" for app in PACKAGES[:-1])]

# The error classes of product code that are not domain errors, each with its reason.
NOT_DOMAIN_ERRORS = {
    "gshost.api.errors.ApiError": "the API edge's own answer, a DRF APIException, for what "
    "exists only there (authentication, scopes, cursors, bodies); domain code never raises it",
}


def product_modules() -> list[Path]:
    """Every module of the apps and the core but their migrations (and `__main__`, which runs
    the program when imported)."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts and path.name != "__main__.py":
                found.append(path)
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def defines_classes(path: Path) -> bool:
    return any(isinstance(node, ast.ClassDef) for node in ast.walk(ast.parse(path.read_text())))


PLAIN_ERRORS = {"ValueError", "Exception", "RuntimeError"}


def plain_raises(source: str) -> list[str]:
    """`raise` statements of a plain error or `<Model>.DoesNotExist`, as source text."""
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


def error_classes(name: str) -> list[type[BaseException]]:
    """The exception classes the module defines (at its top level or inside a class)."""
    module = importlib.import_module(name)
    found: list[type[BaseException]] = []
    pending = [cls for _, cls in inspect.getmembers(module, inspect.isclass)]
    while pending:
        cls = pending.pop()
        if cls.__module__ != name:
            continue
        if issubclass(cls, BaseException):
            found.append(cls)
        if not issubclass(cls, Model):  # a model's DoesNotExist is Django's, made for each
            pending += [inner for inner in vars(cls).values() if inspect.isclass(inner)]
    return found


def nested_error_classes(source: str) -> list[str]:
    """Classes defined inside a function that derive from a builtin error by name: imported,
    the module would not show them, so they are read from the source."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name) and base.id.endswith(("Error", "Exception"))
                for base in node.bases
            ):
                found.append(node.name)
    return found


MODULES = product_modules()
WITH_CLASSES = [path for path in MODULES if defines_classes(path)]


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("module_name", ERROR_MODULES)
def test_every_class_in_an_errors_module_is_a_domain_error(module_name):
    defined = error_classes(module_name)
    assert defined
    assert [cls.__name__ for cls in defined if not issubclass(cls, DomainError)] == []


@pytest.mark.parametrize("path", MODULES, ids=relative)
def test_no_product_module_raises_a_plain_error(path):
    assert plain_raises(path.read_text()) == []


@pytest.mark.parametrize("path", WITH_CLASSES, ids=relative)
def test_every_error_class_of_product_code_is_a_domain_error(path):
    name = module_name(path)
    others = [
        f"{name}.{cls.__qualname__}"
        for cls in error_classes(name)
        if not issubclass(cls, DomainError)
    ]
    assert [error for error in others if error not in NOT_DOMAIN_ERRORS] == []
    assert nested_error_classes(path.read_text()) == []


def subclasses(cls: type[DomainError]) -> list[type[DomainError]]:
    return [cls, *(sub for direct in cls.__subclasses__() for sub in subclasses(direct))]


def test_the_edge_answers_every_domain_error_code():
    for path in WITH_CLASSES:
        importlib.import_module(module_name(path))
    codes = {cls.code for cls in subclasses(DomainError)}
    assert sorted(codes - set(ErrorCode)) == []


def test_the_scan_covers_every_app_and_the_core():
    scanned = {relative(path) for path in MODULES}
    assert {
        "accounts/services.py",
        "accounts/secret_scanning.py",
        "audit/buffer.py",
        "servers/agents/views.py",
        "servers/agents/last_readings.py",
        "servers/management/commands/demo.py",
        "webhooks/targets/transport.py",
        "webhooks/signing.py",
        "gshost/lru.py",
        "gshost/api/pagination.py",
    } <= scanned
    assert not any("migrations" in path or path.startswith("gshost_agent") for path in scanned)


def test_each_stated_exception_is_still_an_error_class_of_product_code():
    for qualified in NOT_DOMAIN_ERRORS:
        module, _, name = qualified.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, Exception) and not issubclass(cls, DomainError)


def test_the_scan_finds_each_plain_raise():
    source = (
        "raise ValueError('bad')\n"
        "raise Exception\n"
        "raise RuntimeError('stuck')\n"
        "raise ApiKey.DoesNotExist('gone')\n"
        "raise KeyNotFound()\n"
    )
    assert plain_raises(source) == [
        "raise ValueError('bad')",
        "raise Exception",
        "raise RuntimeError('stuck')",
        "raise ApiKey.DoesNotExist('gone')",
    ]


def test_the_scan_finds_an_error_class_made_inside_a_function():
    source = "def f():\n    class _Stop(Exception):\n        pass\n    class Row:\n        pass\n"
    assert nested_error_classes(source) == ["_Stop"]
