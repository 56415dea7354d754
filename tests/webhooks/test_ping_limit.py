"""At most two test pings of one organization on the network at once; a third is
`429 rate_limited` (API) or a 429 page (panel), and nothing is sent for it."""

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client, override_settings

from audit.actors import Actor
from tests.conftest import client_for, error_of
from tests.webhooks.delivery_fixtures import (
    HOST,
    wait_for,
)
from tests.webhooks.receiver import HttpsReceiver
from tests.webhooks.webhook_fixtures import HOOKS, WEBHOOK_SCOPES
from webhooks import ping_limit
from webhooks.models import Webhook
from webhooks.services import webhook_create, webhook_send_test

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


pytestmark = pytest.mark.usefixtures("engine_settings")

SLOW_SECONDS = 2.0


@pytest.fixture
def slow_hook(transactional_db: None, acme: Any, receiver: HttpsReceiver) -> Webhook:
    receiver.set_behaviour(status=200, body=b"pong", delay=SLOW_SECONDS)
    hook, _ = webhook_create(
        organization=acme,
        url=f"https://{HOST}:{receiver.port}/hook",
        events=["server.started"],
        actor=TEST_ACTOR,
    )
    return hook


@pytest.fixture
def two_waiting(slow_hook: Webhook, receiver: HttpsReceiver) -> Iterator[list[Any]]:
    """Two pings of Acme held by the slow receiver; yields their results once they are over."""
    results: list[Any] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(webhook_send_test(webhook=slow_hook, actor=TEST_ACTOR))
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(receiver.requests) == 2)
    yield results
    for thread in threads:
        thread.join()


def test_a_third_ping_of_the_organization_is_429_with_retry_after(
    two_waiting, slow_hook, make_key, receiver
):
    response = client_for(make_key(WEBHOOK_SCOPES)).post(f"{HOOKS}/{slow_hook.id}/test")
    assert response.status_code == 429
    error = error_of(response)
    assert error["code"] == "rate_limited"
    assert 1 <= error["retry_after"] == int(response["Retry-After"])
    assert len(receiver.requests) == 2  # nothing was sent for it


def test_the_panel_answers_429_with_a_clear_message(two_waiting, slow_hook, alice):
    client = Client()
    client.force_login(alice.user)
    response = client.post(f"/panel/webhooks/{slow_hook.id}/test")
    assert response.status_code == 429
    assert "two test pings" in response.content.decode()
    assert int(response["Retry-After"]) >= 1


def test_the_waiting_pings_still_succeed(two_waiting, slow_hook):
    two_waiting_results = two_waiting
    wait_for(lambda: len(two_waiting_results) == 2, timeout=SLOW_SECONDS + 10)
    assert [r.succeeded for r in two_waiting_results] == [True, True]


def test_another_organizations_ping_is_not_held_back(two_waiting, globex, receiver):
    hook, _ = webhook_create(
        organization=globex,
        url=f"https://{HOST}:{receiver.port}/other",
        events=["server.started"],
        actor=TEST_ACTOR,
    )
    receiver.set_behaviour(path="/other", status=200, body=b"pong")
    assert webhook_send_test(webhook=hook, actor=TEST_ACTOR).succeeded


def test_a_slot_is_free_again_once_a_ping_is_over(slow_hook, receiver):
    receiver.set_behaviour(status=200, body=b"pong", delay=0)
    for _ in range(3):
        assert webhook_send_test(webhook=slow_hook, actor=TEST_ACTOR).succeeded


UNREACHABLE_CACHE = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
    }
}


def test_an_unreachable_cache_does_not_fail_a_ping(slow_hook, receiver):
    receiver.set_behaviour(status=200, body=b"pong", delay=0)
    ping_limit.reset()
    with override_settings(CACHES=UNREACHABLE_CACHE):
        assert webhook_send_test(webhook=slow_hook, actor=TEST_ACTOR).succeeded


def test_an_unreachable_cache_falls_back_to_a_per_process_cap(slow_hook, receiver):
    ping_limit.reset()
    organization = slow_hook.organization_id
    with (
        override_settings(CACHES=UNREACHABLE_CACHE),
        ping_limit.ping_slot(organization),
        ping_limit.ping_slot(organization),
        pytest.raises(ping_limit.PingLimitReached),
    ):
        webhook_send_test(webhook=slow_hook, actor=TEST_ACTOR)
    assert len(receiver.requests) == 0
