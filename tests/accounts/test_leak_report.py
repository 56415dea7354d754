"""POST /api/public/v1/keys/report-leaked: anyone may report a key they found. A key of ours is
revoked at once; the answer is the same whatever the token."""

import json
import logging

import pytest
from django.core import mail
from django.db import connection
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext
from freezegun import freeze_time
from rest_framework.test import APIClient

from accounts import keys
from accounts.models import ApiKey, LeakSource, RevocationReason
from audit.models import AuditRecord
from tests.conftest import API, client_for, error_of

REPORT = f"{API}/keys/report-leaked"
FOUND_AT = "https://pastebin.example/raw/abc123"


@pytest.fixture
def report(django_capture_on_commit_callbacks):
    def post(body: object, *, ip: str = "198.51.100.7", **extra: str):
        with django_capture_on_commit_callbacks(execute=True):
            return APIClient().post(REPORT, body, format="json", REMOTE_ADDR=ip, **extra)

    return post


def answer(response) -> tuple[int, object, str]:
    return response.status_code, response.json(), response["Content-Type"]


def test_it_revokes_a_reported_key(make_key, report):
    key = make_key(["servers:read"])
    response = report({"token": key.full_key, "url": FOUND_AT})
    assert answer(response) == (202, {"received": True}, "application/json")
    row = ApiKey.objects.get(key_id=key.key_id)
    assert (row.revoked_reason, row.leak_source, row.leak_url) == (
        RevocationReason.LEAKED,
        LeakSource.REPORT,
        FOUND_AT,
    )
    refused = client_for(key).get(f"{API}/account/keys/current")
    assert (refused.status_code, error_of(refused)["code"]) == (401, "token_revoked")


def test_it_audits_the_revocation_and_emails_the_owners(make_key, report):
    key = make_key(name="build-bot")
    report({"token": key.full_key, "url": FOUND_AT})
    (row,) = AuditRecord.objects.filter(action="key.leak_revoked")
    assert (row.source, row.actor_key_id, row.url, row.path, row.ip) == (
        "system",
        key.key_id,
        FOUND_AT,
        REPORT,
        "198.51.100.7",
    )
    (message,) = mail.outbox
    assert message.to == ["alice@acme.test"]
    assert "build-bot" in message.body and key.key_id in message.body
    assert FOUND_AT in message.body and "revoked" in message.body


def test_it_answers_garbage_exactly_as_it_answers_a_real_key(make_key, report):
    key = make_key()
    well_formed = f"gsk_{key.key_id}_{'Q' * 37}"
    garbage = [
        "not a key at all",
        "",
        well_formed + keys.checksum(well_formed),  # forged: real id, valid checksum
        key.full_key[:-1] + ("A" if key.full_key[-1] != "A" else "B"),
    ]
    answers = [answer(report({"token": token, "url": FOUND_AT})) for token in garbage]
    assert ApiKey.objects.get(key_id=key.key_id).revoked_at is None
    assert mail.outbox == [] and not AuditRecord.objects.filter(action="key.leak_revoked")
    answers.append(answer(report({"token": key.full_key, "url": FOUND_AT})))
    assert ApiKey.objects.get(key_id=key.key_id).revoked_at is not None
    answers.append(answer(report({"token": key.full_key})))  # already revoked: nothing more
    assert answers == [(202, {"received": True}, "application/json")] * len(answers)
    assert len(mail.outbox) == 1


def test_it_needs_no_key_and_ignores_any_authorization_header(make_key, report):
    key = make_key()
    response = report({"token": key.full_key}, HTTP_AUTHORIZATION="Bearer gsk_nonsense")
    assert response.status_code == 202
    assert ApiKey.objects.get(key_id=key.key_id).revoked_at is not None


def test_it_does_not_audit_a_report_as_a_call(make_key, report):
    key = make_key()
    before = AuditRecord.objects.count()
    report({"token": "garbage"}, HTTP_AUTHORIZATION=f"Bearer {key.full_key}")
    assert AuditRecord.objects.count() == before


@pytest.fixture
def one_minute():
    """The start of a fixed one-minute window: a run never straddles two windows."""
    with freeze_time("2026-11-26 10:00:00") as frozen:
        yield frozen


def test_it_limits_reports_to_ten_a_minute_per_address(report, one_minute):
    answers = [report({"token": f"garbage-{n}"}) for n in range(11)]
    assert [a.status_code for a in answers] == [202] * 10 + [429]
    refused = answers[-1]
    assert error_of(refused)["code"] == "rate_limited"
    assert int(refused["Retry-After"]) == error_of(refused)["retry_after"] >= 1
    assert refused["X-RateLimit-Limit"] == "10" and refused["X-RateLimit-Remaining"] == "0"
    assert report({"token": "garbage"}, ip="198.51.100.8").status_code == 202  # another address


def test_it_answers_again_in_the_next_minute(report, one_minute):
    for _ in range(11):
        report({"token": "x"})
    one_minute.tick(60)
    assert report({"token": "x"}).status_code == 202


def test_it_counts_refused_bodies_against_the_limit_too(report, one_minute):
    for _ in range(10):
        assert report("not an object").status_code == 400
    assert report({"token": "x"}).status_code == 429


def test_the_limit_is_a_setting(report, settings, one_minute):
    settings.LEAK_REPORT_RATE = "2/min"
    assert [report({"token": "x"}).status_code for _ in range(3)] == [202, 202, 429]


@pytest.mark.parametrize(
    "body",
    [{"url": FOUND_AT}, {"token": 5}, {"token": None}, {"token": "x", "url": 7}, ["x"], "x"],
)
def test_it_refuses_a_body_without_a_token_string(report, body):
    response = report(body)
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"


def test_it_refuses_a_body_that_is_not_json(make_key):
    response = APIClient().post(REPORT, "token=abc", content_type="application/json")
    assert (response.status_code, error_of(response)["code"]) == (400, "invalid_request")


def test_it_keeps_a_plain_and_bounded_url(make_key, report):
    key = make_key()
    report({"token": key.full_key, "url": "https://evil.example/\u202egpj.exe\x00" + "x" * 3000})
    row = ApiKey.objects.get(key_id=key.key_id)
    assert row.leak_url.startswith("https://evil.example/gpj.exe")
    assert len(row.leak_url) == 2000
    assert "\u202e" not in mail.outbox[0].body


def test_it_never_logs_keeps_or_answers_the_token(make_key, report, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, SQL statements with their parameters too
    caplog.set_level(logging.DEBUG, logger="django.db.backends")
    key = make_key()
    with CaptureQueriesContext(connection):
        responses = [
            report({"token": key.full_key, "url": FOUND_AT}),
            report({"token": key.full_key}),
            report({"token": "gsk_x"}),
        ]
    assert "Revoked leaked API key" in caplog.text and "UPDATE" in caplog.text
    kept = [
        caplog.text,
        *(f"{r.content.decode()}\n{dict(r.items())!r}" for r in responses),
        *(f"{m.subject}\n{m.body}" for m in mail.outbox),
        json.dumps([model_to_dict(r) for r in AuditRecord.objects.all()], default=str),
        json.dumps(list(ApiKey.objects.values()), default=str),
    ]
    secret = key.full_key.split("_")[-1]
    assert not [text for text in kept if key.full_key in text or secret[:12] in text]
