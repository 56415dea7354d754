"""docs/webhook-signatures.md: its test vectors and its example receiver are right.

The vectors are checked with an HMAC computed here from the documented rule, independently of
webhooks.signing, and with webhooks.signing.sign itself.
"""

import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from webhooks import signing

DOC = Path(__file__).resolve().parents[2] / "docs" / "webhook-signatures.md"
VECTOR = re.compile(
    r"```text\nsecret: (?P<secret>\S+)\ntimestamp: (?P<timestamp>\d+)\n"
    r"body: (?P<body>[^\n]*)\nsignature: (?P<signature>[0-9a-f]{64})\n```"
)
EXAMPLE = re.compile(r"```python\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Vector:
    secret: str
    timestamp: str
    body: bytes
    signature: str


def vectors() -> list[Vector]:
    text = DOC.read_text(encoding="utf-8")
    return [
        Vector(m["secret"], m["timestamp"], m["body"].encode("utf-8"), m["signature"])
        for m in VECTOR.finditer(text)
    ]


def example_receiver() -> dict[str, Any]:
    (code,) = EXAMPLE.findall(DOC.read_text(encoding="utf-8"))
    namespace: dict[str, Any] = {"__name__": "webhook_receiver_example"}
    exec(compile(code, str(DOC), "exec"), namespace)  # runs our own documentation
    return namespace


def headers_for(vector: Vector) -> dict[str, str]:
    return {"X-Webhook-Timestamp": vector.timestamp, "X-Webhook-Signature": vector.signature}


def test_it_publishes_at_least_three_vectors():
    found = vectors()
    assert len(found) >= 3
    assert all(re.fullmatch(r"whsec_[0-9A-Za-z]{43}", v.secret) for v in found)


@pytest.mark.parametrize("vector", vectors(), ids=lambda v: v.timestamp)
def test_its_vectors_match_an_independent_hmac(vector):
    message = vector.timestamp.encode("ascii") + b"." + vector.body
    computed = hmac.new(vector.secret.encode("utf-8"), message, hashlib.sha256).hexdigest()
    assert computed == vector.signature


@pytest.mark.parametrize("vector", vectors(), ids=lambda v: v.timestamp)
def test_its_vectors_match_the_services_signing(vector):
    assert signing.sign(vector.secret, vector.timestamp, vector.body) == vector.signature


def test_its_vectors_include_non_ascii_bytes():
    assert any(not v.body.isascii() for v in vectors())


@pytest.mark.parametrize("vector", vectors(), ids=lambda v: v.timestamp)
def test_the_example_receiver_accepts_each_vector(vector):
    verify = example_receiver()["verify"]
    now = int(vector.timestamp) + 299
    assert verify(vector.secret, headers_for(vector), vector.body, now=now)


@pytest.mark.parametrize("missing", ["X-Webhook-Timestamp", "X-Webhook-Signature"])
def test_the_example_receiver_requires_both_headers(missing):
    vector = vectors()[0]
    headers = headers_for(vector)
    del headers[missing]
    verify = example_receiver()["verify"]
    assert not verify(vector.secret, headers, vector.body, now=int(vector.timestamp))


@pytest.mark.parametrize("skew", [-301, 301])
def test_the_example_receiver_rejects_a_timestamp_outside_300_seconds(skew):
    vector = vectors()[0]
    verify = example_receiver()["verify"]
    now = int(vector.timestamp) + skew
    assert not verify(vector.secret, headers_for(vector), vector.body, now=now)


def test_the_example_receiver_rejects_a_changed_body():
    vector = vectors()[0]
    verify = example_receiver()["verify"]
    body = vector.body.replace(b"Survival", b"Survivor")
    assert not verify(vector.secret, headers_for(vector), body, now=int(vector.timestamp))


def test_the_example_receiver_rejects_a_signature_over_the_body_alone():
    vector = vectors()[0]
    body_only = hmac.new(vector.secret.encode(), vector.body, hashlib.sha256).hexdigest()
    headers = {**headers_for(vector), "X-Webhook-Signature": body_only}
    verify = example_receiver()["verify"]
    assert not verify(vector.secret, headers, vector.body, now=int(vector.timestamp))


def test_the_services_own_verification_agrees_with_the_vectors():
    for vector in vectors():
        now = int(vector.timestamp)
        assert signing.verify(vector.secret, headers_for(vector), vector.body, now=now)
