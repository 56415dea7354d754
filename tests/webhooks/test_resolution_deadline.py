"""Name resolution counts against an attempt's deadline: a slow resolver ends the attempt as a
timeout when the deadline passes, and a test ping (holding its slot) ends with it."""

from __future__ import annotations

import ipaddress
import threading
import time
from typing import Any

import pytest

from audit.actors import Actor
from tests.webhooks.delivery_fixtures import Hooks, use_resolver
from tests.webhooks.receiver import LOOPBACK, LOOPBACK_NETWORKS, HttpsReceiver
from webhooks.ping_limit import PingLimitReached
from webhooks.services import webhook_send_test
from webhooks.targets.transport import WebhookSender
from webhooks.targets.url_safety import parse_webhook_url

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class SlowResolver:
    """Answers loopback after `seconds`, counting lookups under way at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.under_way = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def __call__(self, host: str, port: int) -> list[IPAddress]:
        with self._lock:
            self.under_way += 1
            self.most_at_once = max(self.most_at_once, self.under_way)
        time.sleep(self.seconds)
        with self._lock:
            self.under_way -= 1
        return [LOOPBACK]


def test_a_slow_resolver_ends_the_attempt_at_its_deadline(https_receiver: HttpsReceiver) -> None:
    sender = WebhookSender(
        ca_bundle=https_receiver.ca_pem_path,
        timeout=0.5,
        allowed_networks=LOOPBACK_NETWORKS,
        resolve=SlowResolver(3.0),
    )
    target = parse_webhook_url(https_receiver.url().replace("127.0.0.1", "hooks.example.test"))
    started = time.monotonic()
    with sender:
        result = sender.send(target=target, body=b"{}", headers={})
    assert (result.error, result.status_code) == ("timeout", None)
    assert time.monotonic() - started < 1.5
    assert 400 <= result.duration_ms < 1500
    assert https_receiver.connections_accepted == 0


def test_a_resolver_within_the_deadline_still_sends(https_receiver: HttpsReceiver) -> None:
    sender = WebhookSender(
        ca_bundle=https_receiver.ca_pem_path,
        timeout=5.0,
        allowed_networks=LOOPBACK_NETWORKS,
        resolve=SlowResolver(0.2),
    )
    target = parse_webhook_url(https_receiver.url().replace("127.0.0.1", "hooks.example.test"))
    with sender:
        result = sender.send(target=target, body=b"{}", headers={})
    assert result.succeeded, result.error
    assert result.duration_ms >= 200


def test_test_pings_with_a_slow_resolver_end_at_the_deadline_and_stay_capped(
    hooks: Hooks, engine_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine_settings.WEBHOOK_TIMEOUT_SECONDS = 1.0
    resolver = SlowResolver(3.0)
    use_resolver(monkeypatch, resolver)
    webhook = hooks.webhook()
    outcomes: list[str] = []
    durations: list[float] = []

    def ping() -> None:
        started = time.monotonic()
        try:
            outcomes.append(webhook_send_test(webhook=webhook, actor=Actor.system("tests")).error)
        except PingLimitReached:
            outcomes.append("refused")
        durations.append(time.monotonic() - started)

    threads = [threading.Thread(target=ping) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes, key=str) == ["refused", "refused", "timeout", "timeout"]
    assert max(durations) < 2.0
    assert resolver.most_at_once <= 2


def test_a_pings_slot_is_held_until_its_abandoned_lookup_has_ended(
    hooks: Hooks, engine_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine_settings.WEBHOOK_TIMEOUT_SECONDS = 0.5
    resolver = SlowResolver(2.0)
    use_resolver(monkeypatch, resolver)
    webhook = hooks.webhook()
    actor = Actor.system("tests")
    threads = [
        threading.Thread(target=webhook_send_test, kwargs={"webhook": webhook, "actor": actor})
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()  # both timed out at 0.5 s; their lookups run on
    with pytest.raises(PingLimitReached):
        webhook_send_test(webhook=webhook, actor=actor)
    deadline = time.monotonic() + 5
    while resolver.under_way and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # the slot is given back just after the lookup ends
    assert webhook_send_test(webhook=webhook, actor=actor).error == "timeout"
    assert resolver.most_at_once <= 2
