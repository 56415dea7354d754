"""Every per-process cache and thread is declared in one registry, with its bound, and one
call drops them all (what the tests do around each test)."""

import ast
from functools import partial
from pathlib import Path

from accounts import key_records
from gshost import process_state
from gshost.process_state import ProcessState
from tests.conftest import API, client_for
from webhooks.targets import client, transport
from webhooks.targets.dev_loopback import LOOPBACK

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("accounts", "audit", "gshost", "servers", "webhooks")
CACHES = {"cache", "lru_cache"}
STATE_AT_IMPORT = {"local", "Semaphore", "BoundedSemaphore", "Thread"}
MUTATORS = {"append", "add", "extend", "update", "setdefault", "put", "pop", "clear", "insert"}

# Modules that keep something across requests on purpose, and why it is no cache to reset.
NOT_STATE = {
    # The registry itself.
    "gshost/process_state.py": "the registry of process state",
    # Filled once by the apps' ready(), the same in every process: wiring, not a cache.
    "gshost/monitoring/metrics.py": "collectors the apps add at start",
    "gshost/schedules.py": "schedules the apps declare at start",
    "accounts/panel_sessions.py": "sessions-ended hooks the apps register at start",
    "gshost/withdrawals.py": "access-withdrawal carriers the apps register at start",
}


def _called(node: ast.AST) -> str | None:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else None


def holds_process_state(tree: ast.Module) -> list[str]:
    """What in a module outlives a request: a cached function, a global rebound, a thread,
    semaphore or thread-local made at import, an at-fork hook, or a module-level container
    that its functions fill."""
    containers = {
        target.id
        for statement in tree.body
        if isinstance(statement, ast.Assign | ast.AnnAssign)
        and isinstance(statement.value, ast.Call | ast.Dict | ast.List | ast.Set)
        for target in (
            statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        )
        if isinstance(target, ast.Name)
    }
    found = [
        f"{_called(statement.value)}() at import"
        for statement in tree.body
        if isinstance(statement, ast.Assign | ast.AnnAssign)
        and isinstance(statement.value, ast.Call)
        and _called(statement.value) in STATE_AT_IMPORT
    ]
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        found += [f"@{_called(d)} {function.name}" for d in function.decorator_list
                  if _called(d) in CACHES]  # fmt: skip
        for node in ast.walk(function):
            if isinstance(node, ast.Global):
                found.append(f"global {', '.join(node.names)}")
            elif isinstance(node, ast.Call) and _called(node) == "register_at_fork":
                found.append("an at-fork hook")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in containers
                and node.func.attr in MUTATORS
            ):
                found.append(f"{node.func.value.id}.{node.func.attr}()")
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                and t.value.id in containers for t in node.targets
            ):  # fmt: skip
                found.append("an item set in a module-level container")
    return found


def registers(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "register"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "process_state"
        for node in ast.walk(tree)
    )


def stateful_modules() -> dict[str, list[str]]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if "migrations" in path.parts or name in NOT_STATE:
                continue
            if what := holds_process_state(ast.parse(path.read_text())):
                found[name] = what
    return found


def test_every_module_holding_process_state_registers_it():
    unregistered = {
        name: what
        for name, what in stateful_modules().items()
        if not registers(ast.parse((ROOT / name).read_text()))
    }
    assert unregistered == {}


def test_the_scan_finds_each_kind_of_process_state():
    source = """
import functools, os, threading
_local = threading.local()
_seen = {}
@functools.lru_cache(maxsize=8)
def cached(): ...
def remember(key):
    global _last
    _seen[key] = True
    _seen.setdefault(key, 1)
    os.register_at_fork(after_in_child=remember)
"""
    assert holds_process_state(ast.parse(source)) == [
        "local() at import",
        "@lru_cache cached",
        "global _last",
        "an item set in a module-level container",
        "_seen.setdefault()",
        "an at-fork hook",
    ]


def test_each_registered_state_says_what_bounds_it():
    assert [state.name for state in process_state.registered() if not state.bound.strip()] == []


def test_reset_all_calls_every_registered_reset_in_name_order(monkeypatch):
    calls: list[str] = []
    recording = {
        state.name: ProcessState(state.name, state.bound, partial(calls.append, state.name))
        for state in process_state.registered()
    }
    monkeypatch.setattr(process_state, "_registry", recording)
    process_state.reset_all()
    assert calls == sorted(recording)


def test_reset_all_forgets_the_cached_key_records(make_key):
    key = make_key()
    assert client_for(key).get(f"{API}/account/keys/current").status_code == 200
    assert key.key_id in key_records._cache
    process_state.reset_all()
    assert key.key_id not in key_records._cache


def test_reset_all_forgets_the_webhook_ssl_contexts():
    transport.ssl_context_for(None)
    assert transport._build_ssl_context.cache_info().currsize == 1
    process_state.reset_all()
    assert transport._build_ssl_context.cache_info().currsize == 0


def test_reset_all_puts_back_the_sender_factory_the_settings_ask_for(settings, monkeypatch):
    monkeypatch.setattr(client, "sender_factory", lambda config: None)
    settings.DEV_WEBHOOK_LOOPBACK_HOSTS = ["receiver.gshost-demo.example"]
    process_state.reset_all()
    resolve = client.sender_factory.keywords["resolve"]
    assert resolve("receiver.gshost-demo.example", 443) == [LOOPBACK]
