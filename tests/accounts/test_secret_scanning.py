"""GitHub's secret-scanning alerts: signed by GitHub, each token of ours revoked at once.

The alerts are signed here with a key pair of our own, published by a real HTTP server on
127.0.0.1 in GitHub's format (tests/accounts/secret_scanning_kit.py).
"""

import hashlib
import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from django.core import mail
from django.core.cache import cache
from django.core.signals import got_request_exception
from django.db import connection
from django.forms.models import model_to_dict
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.views.debug import ExceptionReporter
from freezegun import freeze_time

from accounts import keys, secret_scanning
from accounts.models import ApiKey, LeakSource, RevocationReason
from accounts.services import api_key_revoke, api_key_rotate
from audit.actors import Actor
from audit.models import AuditRecord
from audit.services import PanelContext
from tests.accounts.secret_scanning_kit import (
    GITHUB_ROUTE,
    GitHub,
    KeysServer,
    alert_body,
    public_pem,
    serve_keys,
)
from tests.conftest import API, client_for, error_of

FOUND_AT = "https://github.com/octo/app/blob/main/.env"


@pytest.fixture
def keys_server(settings) -> Iterator[KeysServer]:
    for server in serve_keys(KeysServer()):
        settings.SECRET_SCANNING_KEYS_URL = server.url
        yield server


@pytest.fixture
def github(keys_server: KeysServer) -> GitHub:
    sender = GitHub(private_key=ec.generate_private_key(ec.SECP256R1()), keys=keys_server)
    sender.publish()
    return sender


@pytest.fixture
def send(github: GitHub, client: Client, django_capture_on_commit_callbacks):
    def post(body: bytes, **headers: str):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(
                GITHUB_ROUTE,
                data=body,
                content_type="application/json",
                **{**github.headers(body), **headers},
            )

    return post


def sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def key_row(key_id: str) -> ApiKey:
    return ApiKey.objects.get(key_id=key_id)


def leak_rows() -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(action="key.leak_revoked"))


def test_it_revokes_a_leaked_key_and_labels_it_true_positive(make_key, send):
    key = make_key(["servers:read"])
    response = send(alert_body(key.full_key))
    assert response.status_code == 200
    assert response.json() == [
        {
            "token_hash": sha256(key.full_key),
            "token_type": "gshost_api_key",
            "label": "true_positive",
        }
    ]
    row = key_row(key.key_id)
    assert row.revoked_at is not None
    assert (row.revoked_reason, row.leak_source, row.leak_url) == (
        RevocationReason.LEAKED,
        LeakSource.GITHUB_SECRET_SCANNING,
        FOUND_AT,
    )


def test_it_refuses_the_next_call_of_a_leaked_key(make_key, send):
    key = make_key(["servers:read"])
    assert client_for(key).get(f"{API}/account/keys/current").status_code == 200  # now cached
    send(alert_body(key.full_key))
    response = client_for(key).get(f"{API}/account/keys/current")
    assert response.status_code == 401
    assert error_of(response)["code"] == "token_revoked"


def test_it_audits_the_revocation_as_the_platform_with_the_url(make_key, send):
    key = make_key()
    send(alert_body(key.full_key))
    (row,) = leak_rows()
    assert (row.organization_id, row.source, row.actor_type, row.actor_key_id, row.url) == (
        key.organization_id,
        "system",
        "system",
        key.key_id,
        FOUND_AT,
    )
    assert (row.method, row.path) == ("POST", GITHUB_ROUTE)


def test_it_shows_the_leak_in_the_organizations_audit_api(make_key, send):
    key = make_key()
    reader = make_key(["audit:read"])
    send(alert_body(key.full_key))
    records = client_for(reader).get(f"{API}/account/audit?key_id={key.key_id}").json()["results"]
    (record,) = [r for r in records if r["action"] == "key.leak_revoked"]
    assert record["source"] == "system"
    assert record["actor"] == {"type": "system", "key_id": key.key_id}
    assert record["url"] == FOUND_AT


def test_it_emails_the_owners_naming_the_key_and_where_it_was_found(make_key, send, bob):
    key = make_key(name="ci-deployer")
    send(alert_body(key.full_key))
    (message,) = mail.outbox
    assert message.to == ["alice@acme.test"]  # the owner; bob is a member
    assert key.key_id in message.subject and "ci-deployer" in message.subject
    assert "revoked" in message.subject
    assert f"Key: ci-deployer (id {key.key_id})" in message.body
    assert FOUND_AT in message.body
    assert "GitHub secret scanning" in message.body
    assert key.full_key not in message.body


def test_it_labels_tokens_that_are_not_our_keys_false_positive(make_key, send):
    key = make_key()
    forged = f"gsk_{key.key_id}_{'x' * 37}"  # a real key id, a valid checksum, a wrong secret
    unknown_id = f"gsk_Unknown1_{'y' * 37}"
    tokens = [
        "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        key.full_key[:-1] + ("A" if key.full_key[-1] != "A" else "B"),  # checksum broken
        forged + keys.checksum(forged),
        unknown_id + keys.checksum(unknown_id),
    ]
    response = send(alert_body(*tokens))
    assert response.status_code == 200
    assert [entry["label"] for entry in response.json()] == ["false_positive"] * 4
    assert [entry["token_hash"] for entry in response.json()] == [sha256(t) for t in tokens]
    assert key_row(key.key_id).revoked_at is None
    assert leak_rows() == [] and mail.outbox == []


def test_it_labels_expired_and_revoked_keys_true_positive_and_changes_nothing(make_key, send):
    with freeze_time(timezone.now() - timedelta(days=2)):
        expired = make_key(expiry_days=1)
    revoked = make_key()
    api_key_revoke(key=key_row(revoked.key_id), actor=Actor.system("tests"))
    before = {k.key_id: (k.revoked_at, k.revoked_reason) for k in ApiKey.objects.all()}
    response = send(alert_body(expired.full_key, revoked.full_key))
    assert [entry["label"] for entry in response.json()] == ["true_positive", "true_positive"]
    assert {k.key_id: (k.revoked_at, k.revoked_reason) for k in ApiKey.objects.all()} == before
    assert leak_rows() == [] and mail.outbox == []


def test_it_revokes_a_key_in_its_rotation_grace_period(make_key, send, alice):
    key = make_key()
    context = PanelContext(user_email="alice@acme.test")
    successor = api_key_rotate(
        key=key_row(key.key_id), membership=alice, grace_hours=24, actor=Actor.person(context)
    )
    response = send(alert_body(key.full_key))
    assert response.json()[0]["label"] == "true_positive"
    assert key_row(key.key_id).revoked_reason == RevocationReason.LEAKED
    assert key_row(successor.key.key_id).revoked_at is None  # its own secret did not leak


def test_it_revokes_a_key_that_never_expires(make_key, send):
    key = make_key(expiry_days=None)
    assert send(alert_body(key.full_key)).json()[0]["label"] == "true_positive"
    assert key_row(key.key_id).revoked_reason == RevocationReason.LEAKED


def test_it_answers_once_per_token_and_revokes_a_repeated_token_once(make_key, send):
    key = make_key()
    response = send(alert_body(key.full_key, key.full_key))
    assert [entry["label"] for entry in response.json()] == ["true_positive"] * 2
    assert len(leak_rows()) == 1 and len(mail.outbox) == 1


def test_it_refuses_an_alert_signed_by_another_key(make_key, send, github):
    key = make_key()
    body = alert_body(key.full_key)
    impostor = GitHub(private_key=ec.generate_private_key(ec.SECP256R1()), keys=github.keys)
    response = send(body, **impostor.headers(body))
    assert response.status_code == 401
    assert error_of(response)["code"] == "invalid_signature"
    assert key_row(key.key_id).revoked_at is None


def test_it_refuses_a_signature_over_another_body(make_key, send, github):
    key = make_key()
    response = send(alert_body(key.full_key), **github.headers(alert_body("something else")))
    assert response.status_code == 401
    assert key_row(key.key_id).revoked_at is None


@pytest.mark.parametrize(
    "dropped",
    [
        ["HTTP_GITHUB_PUBLIC_KEY_IDENTIFIER"],
        ["HTTP_GITHUB_PUBLIC_KEY_SIGNATURE"],
        ["HTTP_GITHUB_PUBLIC_KEY_IDENTIFIER", "HTTP_GITHUB_PUBLIC_KEY_SIGNATURE"],
    ],
)
def test_it_refuses_an_alert_without_its_signature_headers(
    make_key, github, client, keys_server, dropped
):
    key = make_key()
    body = alert_body(key.full_key)
    headers = {k: v for k, v in github.headers(body).items() if k not in dropped}
    response = client.post(GITHUB_ROUTE, data=body, content_type="application/json", **headers)
    assert response.status_code == 401
    assert key_row(key.key_id).revoked_at is None
    assert keys_server.fetches == 0  # refused before anything is fetched


def test_it_refuses_a_signature_that_is_not_base64(make_key, send):
    key = make_key()
    response = send(alert_body(key.full_key), HTTP_GITHUB_PUBLIC_KEY_SIGNATURE="not*base64!")
    assert response.status_code == 401
    assert key_row(key.key_id).revoked_at is None


def test_it_refuses_an_unknown_key_identifier_after_exactly_one_refetch(
    make_key, send, github, keys_server
):
    send(alert_body("ghp_warm_the_cache"))
    assert keys_server.fetches == 1
    key = make_key()
    response = send(alert_body(key.full_key), HTTP_GITHUB_PUBLIC_KEY_IDENTIFIER="f" * 64)
    assert response.status_code == 401
    assert keys_server.fetches == 2
    assert key_row(key.key_id).revoked_at is None


def test_it_refetches_for_unknown_identifiers_at_most_once_in_five_minutes(
    send, github, keys_server
):
    send(alert_body("ghp_warm_the_cache"))
    for identifier in ["a" * 64, "b" * 64, "c" * 64]:
        assert (
            send(alert_body("x"), HTTP_GITHUB_PUBLIC_KEY_IDENTIFIER=identifier).status_code == 401
        )
    assert keys_server.fetches == 2


def test_it_accepts_a_key_github_published_since_the_keys_were_cached(
    make_key, send, github, keys_server
):
    send(alert_body("ghp_warm_the_cache"))
    github.private_key, github.identifier = ec.generate_private_key(ec.SECP256R1()), "new" * 20
    github.publish()
    key = make_key()
    response = send(alert_body(key.full_key))
    assert response.status_code == 200
    assert response.json()[0]["label"] == "true_positive"
    assert keys_server.fetches == 2


def test_it_keeps_the_public_keys_for_30_minutes(send, keys_server):
    assert secret_scanning.CACHE_SECONDS == 30 * 60
    send(alert_body("one"))
    send(alert_body("two"))
    assert keys_server.fetches == 1


def test_it_fetches_the_public_keys_again_once_they_expire(send, keys_server, monkeypatch):
    monkeypatch.setattr(secret_scanning, "CACHE_SECONDS", 1)  # Redis cannot be time-travelled
    send(alert_body("one"))
    time.sleep(1.2)
    send(alert_body("two"))
    assert keys_server.fetches == 2


def test_it_answers_413_for_a_body_over_1_mib(make_key, send):
    key = make_key()
    body = alert_body(key.full_key, url="https://example.test/" + "x" * (1024 * 1024))
    response = send(body)
    assert response.status_code == 413
    assert error_of(response)["code"] == "payload_too_large"
    assert key_row(key.key_id).revoked_at is None


def test_it_answers_503_and_revokes_nothing_when_the_keys_cannot_be_fetched(
    make_key, send, keys_server
):
    keys_server.down = True
    key = make_key()
    response = send(alert_body(key.full_key))
    assert response.status_code == 503
    assert response["Retry-After"] == "60"
    assert error_of(response)["code"] == "keys_unavailable"
    assert key_row(key.key_id).revoked_at is None


def test_it_answers_503_when_nothing_listens_at_the_keys_url(make_key, send, settings):
    settings.SECRET_SCANNING_KEYS_URL = "http://127.0.0.1:9/meta/public_keys/secret_scanning"
    key = make_key()
    assert send(alert_body(key.full_key)).status_code == 503
    assert key_row(key.key_id).revoked_at is None


def test_it_answers_503_for_a_keys_document_that_is_not_githubs(make_key, send, keys_server):
    keys_server.document = {"keys": []}
    key = make_key()
    assert send(alert_body(key.full_key)).status_code == 503
    assert key_row(key.key_id).revoked_at is None


def test_it_answers_503_when_the_published_key_is_not_p256(make_key, send, github):
    github.keys.document["public_keys"][0]["key"] = public_pem(
        ec.generate_private_key(ec.SECP384R1())
    )
    key = make_key()
    assert send(alert_body(key.full_key)).status_code == 503
    assert key_row(key.key_id).revoked_at is None


def test_it_does_not_use_proxies_from_the_environment(make_key, send, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "")
    key = make_key()
    assert send(alert_body(key.full_key)).status_code == 200


@pytest.mark.parametrize(
    "body", [b"{}", b'{"token": "x"}', b"[1]", b'[{"token": 5}]', b"not json", b""]
)
def test_it_answers_400_for_a_signed_body_that_is_not_a_list_of_tokens(send, body):
    response = send(body)
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"


def test_it_needs_no_csrf_token_and_no_bearer_key(make_key, github, keys_server):
    key = make_key()
    body = alert_body(key.full_key)
    browserless = Client(enforce_csrf_checks=True)
    response = browserless.post(
        GITHUB_ROUTE, data=body, content_type="application/json", **github.headers(body)
    )
    assert response.status_code == 200


def test_it_answers_only_post(client):
    assert client.get(GITHUB_ROUTE).status_code == 405


def test_it_never_logs_keeps_or_answers_a_token(make_key, send, github, keys_server, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, SQL statements with their parameters too
    caplog.set_level(logging.DEBUG, logger="django.db.backends")
    key = make_key()
    other = make_key()
    forged = f"gsk_{other.key_id}_{'x' * 37}"
    forged += keys.checksum(forged)
    with CaptureQueriesContext(connection):
        answers = [
            send(alert_body(key.full_key, forged, "ghp_foreign_token_value")),
            send(alert_body(key.full_key)),  # already revoked now
            send(alert_body(other.full_key), HTTP_GITHUB_PUBLIC_KEY_IDENTIFIER="unknown"),
            send(alert_body(other.full_key), HTTP_GITHUB_PUBLIC_KEY_SIGNATURE="AAAA"),
        ]
        keys_server.down = True
        cache.clear()
        answers.append(send(alert_body(other.full_key)))
    assert [a.status_code for a in answers] == [200, 200, 401, 401, 503]
    assert "Revoked leaked API key" in caplog.text and "UPDATE" in caplog.text  # all captured
    kept = [
        caplog.text,
        *(f"{a.content.decode()}\n{dict(a.items())!r}" for a in answers),
        *(f"{m.subject}\n{m.body}" for m in mail.outbox),
        json.dumps([model_to_dict(r) for r in AuditRecord.objects.all()], default=str),
        json.dumps(list(ApiKey.objects.values()), default=str),
    ]
    for token in [key.full_key, other.full_key, forged, "ghp_foreign_token_value"]:
        secret = token.split("_")[-1]
        assert not [text for text in kept if token in text or secret[:12] in text]


def test_it_reports_a_failure_without_the_token(make_key, github, caplog, monkeypatch, settings):
    """Django's error report (mailed to ADMINS; in HTML with every frame's variables) hides
    ours: the alert, its body and each token."""
    settings.ADMINS = [("Ops", "ops@gshost.test")]
    failures = []

    def broken(**kwargs):
        raise RuntimeError("database gone")

    def remember(sender, request, **kwargs):
        failures.append((request, sys.exc_info()))

    monkeypatch.setattr("accounts.leaks.api_key_revoke_leaked", broken)
    got_request_exception.connect(remember)
    key = make_key()
    body = alert_body(key.full_key)
    try:
        response = Client(raise_request_exception=False).post(
            GITHUB_ROUTE, data=body, content_type="application/json", **github.headers(body)
        )
    finally:
        got_request_exception.disconnect(remember)
    assert response.status_code == 500
    assert "database gone" in caplog.text  # the failure is logged, with its traceback
    (request, exc_info) = failures[0]
    html = ExceptionReporter(request, *exc_info, is_email=True).get_traceback_html()
    assert "database gone" in html and "<td>alerts</td>" in html  # variables listed, hidden
    (mailed,) = mail.outbox
    for text in [caplog.text, response.content.decode(), mailed.body, html]:
        assert key.full_key not in text
        assert key.full_key.split("_")[-1] not in text


def test_a_failed_fetch_is_remembered_for_60_seconds(make_key, send, keys_server):
    keys_server.down = True
    key = make_key()
    with freeze_time() as clock:
        assert send(alert_body(key.full_key)).status_code == 503
        assert send(alert_body(key.full_key)).status_code == 503
        assert keys_server.fetches == 1  # the second alert made no fetch
        keys_server.down = False
        clock.tick(61)
        cache.delete(secret_scanning.FAILURE_MARK)  # (a cache server does not time-travel)
        assert send(alert_body(key.full_key)).status_code == 200
    assert keys_server.fetches == 2
    assert secret_scanning.FAILURE_SECONDS == 60


def test_one_fetch_runs_at_a_time_and_the_others_take_its_outcome(
    make_key, keys_server, monkeypatch
):
    keys_server.down = True
    started, release = threading.Event(), threading.Event()
    real_fetch = secret_scanning.fetch_public_keys

    def slow_fetch(url: str) -> dict[str, str]:
        started.set()
        release.wait(10)
        return real_fetch(url)

    monkeypatch.setattr(secret_scanning, "fetch_public_keys", slow_fetch)
    outcomes: list[str] = []

    def alert() -> None:
        try:
            secret_scanning._fetch_and_keep()
            outcomes.append("keys")
        except secret_scanning.KeysUnavailable:
            outcomes.append("unavailable")

    threads = [threading.Thread(target=alert) for _ in range(5)]
    threads[0].start()
    assert started.wait(10)
    for thread in threads[1:]:
        thread.start()
    release.set()
    for thread in threads:
        thread.join(10)
    assert outcomes == ["unavailable"] * 5
    assert keys_server.fetches == 1
