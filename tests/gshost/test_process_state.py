"""Every per-process cache and thread is declared in one registry, with its bound, and one
call drops them all (what the tests do around each test)."""

import importlib
from functools import partial

import pytest

from accounts import key_records
from gshost import process_state
from gshost.process_state import ProcessState
from tests.conftest import API, client_for

pytestmark = pytest.mark.usefixtures("fast_password_hashing")

# Each of these modules registers its state under its own name.
REGISTERING_MODULES = (
    "accounts.authentication",
    "accounts.key_records",
    "accounts.keys",
    "accounts.usage",
    "audit.buffer",
    "audit.failed_auth",
    "gshost.api.client_ip",
    "gshost.api.rate_limits",
    "gshost.encryption",
    "gshost.monitoring.middleware",
    "gshost.monitoring.views",
    "servers.agent_runtime",
    "servers.configuration",
    "servers.runtime",
    "webhooks.ping_limit",
)


def test_the_registry_lists_every_cache_and_thread():
    for module in REGISTERING_MODULES:
        importlib.import_module(module)
    assert set(REGISTERING_MODULES) <= {state.name for state in process_state.registered()}


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
