"""Pure tests for webhooks.signing: no database, no Django settings, no network."""

from __future__ import annotations

import hashlib
import hmac
import time

import pytest

from gshost.errors import Misuse
from webhooks.signing import sign, signature_headers, verify, verify_signature

SECRET = "whsec_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0u1V"
BODY = '{"event":"server.started","data":{"name":"Überleben"}}'.encode()
NOW = 1_767_225_600


def _signed(body: bytes = BODY, *, timestamp: int = NOW) -> dict[str, str]:
    return signature_headers(SECRET, body, now=timestamp)


def test_it_uses_a_secret_of_the_documented_shape() -> None:
    assert len(SECRET) == len("whsec_") + 43


def test_it_signs_timestamp_dot_body_with_hmac_sha256_of_the_whole_secret() -> None:
    expected = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()

    assert sign(SECRET, NOW, BODY) == expected


def test_it_puts_timestamp_and_signature_in_headers() -> None:
    headers = _signed()

    assert headers == {
        "X-Webhook-Timestamp": str(NOW),
        "X-Webhook-Signature": sign(SECRET, NOW, BODY),
    }


def test_it_stamps_the_current_time_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: NOW + 0.9)

    assert signature_headers(SECRET, BODY) == _signed(timestamp=NOW)


def test_it_refuses_an_empty_secret() -> None:
    with pytest.raises(Misuse):
        sign("", NOW, BODY)


def test_it_accepts_a_fresh_valid_signature() -> None:
    assert verify(SECRET, _signed(), BODY, now=NOW + 5)


def test_it_rejects_a_signature_over_the_body_only() -> None:
    body_only = hmac.new(SECRET.encode(), BODY, hashlib.sha256).hexdigest()
    headers = {"X-Webhook-Timestamp": str(NOW), "X-Webhook-Signature": body_only}

    assert not verify(SECRET, headers, BODY, now=NOW)


def test_it_rejects_a_signature_without_the_secret_prefix() -> None:
    headers = _signed()
    headers["X-Webhook-Signature"] = sign(SECRET.removeprefix("whsec_"), NOW, BODY)

    assert not verify(SECRET, headers, BODY, now=NOW)


def test_it_rejects_a_timestamp_older_than_the_tolerance() -> None:
    assert not verify(SECRET, _signed(), BODY, now=NOW + 301)


def test_it_accepts_a_timestamp_exactly_at_the_tolerance() -> None:
    assert verify(SECRET, _signed(), BODY, now=NOW + 300)


def test_it_rejects_a_timestamp_too_far_in_the_future() -> None:
    assert not verify(SECRET, _signed(), BODY, now=NOW - 301)


def test_it_honours_a_custom_tolerance() -> None:
    assert not verify(SECRET, _signed(), BODY, tolerance=10, now=NOW + 11)


@pytest.mark.parametrize("missing", ["X-Webhook-Timestamp", "X-Webhook-Signature"])
def test_it_rejects_missing_headers(missing: str) -> None:
    headers = _signed()
    del headers[missing]

    assert not verify(SECRET, headers, BODY, now=NOW)


def test_it_matches_header_names_case_insensitively() -> None:
    headers = {name.lower(): value for name, value in _signed().items()}

    assert verify(SECRET, headers, BODY, now=NOW)


def test_it_rejects_a_tampered_body() -> None:
    assert not verify(SECRET, _signed(), BODY + b" ", now=NOW)


def test_it_rejects_another_secret() -> None:
    other = "whsec_" + "Z" * 43

    assert not verify(other, _signed(), BODY, now=NOW)


def test_it_rejects_a_replayed_signature_with_a_new_timestamp() -> None:
    headers = _signed()
    headers["X-Webhook-Timestamp"] = str(NOW + 60)

    assert not verify(SECRET, headers, BODY, now=NOW + 60)


@pytest.mark.parametrize("timestamp", ["", "abc", "-5", "1.5", " 1767225600", "١٧٦٧", "9" * 40])
def test_it_rejects_a_malformed_timestamp(timestamp: str) -> None:
    assert not verify_signature(SECRET, timestamp, sign(SECRET, NOW, BODY), BODY, now=NOW)


def test_it_rejects_a_non_ascii_signature_without_raising() -> None:
    assert not verify_signature(SECRET, str(NOW), "é" * 64, BODY, now=NOW)


def test_it_verifies_the_timestamp_string_as_sent() -> None:
    signature = sign(SECRET, "0" + str(NOW), BODY)

    assert verify_signature(SECRET, "0" + str(NOW), signature, BODY, now=NOW)
    assert not verify_signature(SECRET, str(NOW), signature, BODY, now=NOW)
