"""Development only: the demo receiver's name resolves to loopback; nothing else changes."""

import hashlib
import hmac
import ipaddress
import time

import pytest

from gshost import demo_receiver
from webhooks.targets import client, dev_loopback
from webhooks.targets.dev_loopback import LOOPBACK, loopback_for


def test_it_resolves_a_configured_name_to_loopback():
    resolve = loopback_for(frozenset({"receiver.gshost-demo.example"}))
    assert resolve("Receiver.GSHost-Demo.example.", 8443) == [LOOPBACK]


def test_it_leaves_every_other_name_to_the_system_resolver(monkeypatch):
    public = ipaddress.ip_address("203.0.113.7")
    monkeypatch.setattr(dev_loopback, "resolve_host", lambda host, port: [public])
    resolve = loopback_for(frozenset({"receiver.gshost-demo.example"}))
    assert resolve("example.com", 443) == [public]


def test_it_is_not_installed_outside_development(settings):
    assert settings.DEV_WEBHOOK_LOOPBACK_HOSTS == []
    assert client.sender_factory is client.build_sender


def _signed(secret: str, body: bytes, timestamp: int) -> tuple[str, str]:
    message = str(timestamp).encode() + b"." + body
    return str(timestamp), hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    ("secret_used", "age", "outcome"),
    [
        ("whsec_right", 0, "verified"),
        ("whsec_wrong", 0, "REJECTED: signature does not match"),
        ("whsec_right", 301, "REJECTED: timestamp outside the 300 s window"),
    ],
)
def test_the_demo_receiver_checks_signatures_like_a_receiver_should(secret_used, age, outcome):
    body = b'{"event":"server.started"}'
    timestamp, signature = _signed(secret_used, body, int(time.time()) - age)
    assert demo_receiver.verify("whsec_right", timestamp, signature, body) == outcome


def test_the_demo_receiver_rejects_a_request_without_signature_headers():
    outcome = demo_receiver.verify("whsec_right", None, None, b"{}")
    assert outcome == "REJECTED: a signature header is missing"
