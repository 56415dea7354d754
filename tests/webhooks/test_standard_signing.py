"""Standard Webhooks headers, checked with the official `standardwebhooks` library.

The library base64-decodes a `whsec_` string; our HMAC key is the secret's UTF-8 bytes, so a
receiver hands the library those bytes (as the docs say).
"""

import base64
import hashlib
import hmac
import re
import time
from pathlib import Path

import pytest
from standardwebhooks import Webhook as StandardWebhook
from standardwebhooks import WebhookVerificationError

from webhooks.signing import signature_headers, standard_signature

SECRET = "whsec_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefg"
OLD_SECRET = "whsec_0ldSecret0ldSecret0ldSecret0ldSecret0ldS"
BODY = b'{"event":"server.crashed","data":{"exit_code":137},"name":"\xc3\x9cberleben"}'


def verifier(secret: str) -> StandardWebhook:
    return StandardWebhook(secret.encode("utf-8"))


def test_it_signs_like_the_standard_independently_computed():
    digest = hmac.new(SECRET.encode(), b"dlv_1.1700000000." + BODY, hashlib.sha256).digest()
    expected = "v1," + base64.b64encode(digest).decode()
    assert standard_signature(SECRET, "dlv_1", 1700000000, BODY) == expected


def test_it_is_verified_by_the_standardwebhooks_library():
    headers = signature_headers(SECRET, BODY, message_id="dlv_abc")
    assert verifier(SECRET).verify(BODY, headers)["event"] == "server.crashed"


def test_it_uses_the_same_timestamp_in_both_schemes():
    headers = signature_headers(SECRET, BODY, message_id="dlv_abc", now=1700000123)
    assert headers["webhook-timestamp"] == headers["X-Webhook-Timestamp"] == "1700000123"
    assert headers["webhook-id"] == "dlv_abc"


def test_it_fails_verification_of_a_tampered_body():
    headers = signature_headers(SECRET, BODY, message_id="dlv_abc")
    with pytest.raises(WebhookVerificationError):
        verifier(SECRET).verify(BODY.replace(b"137", b"138"), headers)


def test_it_fails_verification_with_another_secret():
    headers = signature_headers(SECRET, BODY, message_id="dlv_abc")
    with pytest.raises(WebhookVerificationError):
        verifier(OLD_SECRET).verify(BODY, headers)


def test_it_carries_both_signatures_new_first_during_a_grace_period():
    headers = signature_headers(
        SECRET, BODY, message_id="dlv_abc", now=1700000000, previous_secret=OLD_SECRET
    )
    assert headers["webhook-signature"].split(" ") == [
        standard_signature(SECRET, "dlv_abc", 1700000000, BODY),
        standard_signature(OLD_SECRET, "dlv_abc", 1700000000, BODY),
    ]


def test_it_is_verified_with_either_secret_during_a_grace_period():
    headers = signature_headers(SECRET, BODY, message_id="dlv_abc", previous_secret=OLD_SECRET)
    verifier(SECRET).verify(BODY, headers)
    verifier(OLD_SECRET).verify(BODY, headers)


def test_it_signs_the_legacy_header_with_the_previous_secret_during_a_grace_period():
    now = int(time.time())
    headers = signature_headers(
        SECRET, BODY, message_id="dlv_abc", now=now, previous_secret=OLD_SECRET
    )
    expected = hmac.new(OLD_SECRET.encode(), f"{now}.".encode() + BODY, hashlib.sha256)
    assert headers["X-Webhook-Signature"] == expected.hexdigest()


def test_it_leaves_out_the_standard_headers_without_a_message_id():
    assert set(signature_headers(SECRET, BODY)) == {"X-Webhook-Timestamp", "X-Webhook-Signature"}


DOC = Path(__file__).resolve().parents[2] / "docs" / "webhook-signatures.md"
DOC_BODY = (
    b'{"event":"server.started","occurred_at":"2025-11-22T10:15:03.120Z","server":'
    b'{"id":"srv_4fQ9xK2mLp7RtY3wZa8B","name":"Survival"},"data":{"previous_state":"starting"},'
    b'"delivery_id":"dlv_7HcN2pQ4sV9xB1mK6tRw"}'
)
DOC_SECRET = "whsec_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
DOC_NEW_SECRET = "whsec_ZyXwVuTsRqPoNmLkJiHgFeDcBa9876543210zyxwvut"


def documented_signatures() -> list[str]:
    return re.findall(r"```text\nwebhook-signature: ([^\n]+)\n```", DOC.read_text("utf-8"))


def test_its_documented_vector_matches_an_independent_hmac():
    message = b"dlv_7HcN2pQ4sV9xB1mK6tRw.1763806503." + DOC_BODY
    digest = hmac.new(DOC_SECRET.encode(), message, hashlib.sha256).digest()
    assert documented_signatures()[0] == "v1," + base64.b64encode(digest).decode()


def test_its_documented_grace_vector_is_what_the_service_sends():
    headers = signature_headers(
        DOC_NEW_SECRET,
        DOC_BODY,
        now=1763806503,
        message_id="dlv_7HcN2pQ4sV9xB1mK6tRw",
        previous_secret=DOC_SECRET,
    )
    assert documented_signatures()[1] == headers["webhook-signature"]
