"""Idempotency-Key: the first answer is kept and replayed; another body with the same key is
refused; concurrent requests with one key make one server."""

from datetime import timedelta

import freezegun
from django.test import Client
from django.utils import timezone

from application import idempotency
from application.models import IdempotentRequest, IntegrationKey
from servers.models import Server
from tests.application.conftest import APP, Billing, error_code, mint
from tests.application.test_servers import order


def test_the_same_key_and_body_replay_the_first_answer(billing: Billing):
    customer = billing.customer()
    body = order(customer)

    first = billing.call("POST", "/servers", body, **{"Idempotency-Key": "k-1"})
    again = billing.call("POST", "/servers", body, **{"Idempotency-Key": "k-1"})

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert Server.objects.count() == 1


def test_the_same_key_with_another_body_is_refused(billing: Billing):
    customer = billing.customer()
    billing.call("POST", "/servers", order(customer), **{"Idempotency-Key": "k-1"})

    answer = billing.call(
        "POST", "/servers", order(customer, name="Other"), **{"Idempotency-Key": "k-1"}
    )

    assert answer.status_code == 422 and error_code(answer) == "idempotency_key_reused"
    assert Server.objects.count() == 1


def test_a_refusal_is_kept_and_replayed_too(billing: Billing):
    body = order({"id": "org_nobody"})

    first = billing.call("POST", "/servers", body, **{"Idempotency-Key": "k-1"})
    again = billing.call("POST", "/servers", body, **{"Idempotency-Key": "k-1"})

    assert first.status_code == again.status_code == 404
    assert again.json() == first.json()


def test_a_key_is_new_again_after_24_hours(billing: Billing):
    customer = billing.customer()
    with freezegun.freeze_time("2026-12-01 10:00:00") as clock:
        billing.call("POST", "/servers", order(customer, "s-1"), **{"Idempotency-Key": "k-1"})
        clock.tick(timedelta(hours=24, seconds=1))
        later = billing.call(
            "POST", "/servers", order(customer, "s-2"), **{"Idempotency-Key": "k-1"}
        )

    assert later.status_code == 201 and Server.objects.count() == 2
    assert IdempotentRequest.objects.count() == 1  # the old row made way for the new one


def test_keys_are_per_integration(billing: Billing):
    customer = billing.customer()
    billing.call("POST", "/servers", order(customer, "s-1"), **{"Idempotency-Key": "k-1"})

    other = billing.call(
        "POST", "/servers", order(customer, "s-2"), key=mint(), **{"Idempotency-Key": "k-1"}
    )

    assert other.status_code == 201 and Server.objects.count() == 2
    assert IdempotentRequest.objects.count() == 2


def test_an_unprintable_key_is_invalid_request(billing: Billing):
    answer = billing.call("POST", "/plans", {}, **{"Idempotency-Key": "x" * 256})

    assert answer.status_code == 400 and error_code(answer) == "invalid_request"


def test_a_key_still_in_progress_is_answered_in_use_with_retry_after(db, monkeypatch):
    monkeypatch.setattr(idempotency, "WAIT_SECONDS", 0.0)
    key = mint()
    body = {
        "name": "Small",
        "memory_mb": 1024,
        "disk_mb": 1024,
        "cpu_percent": 100,
        "processes": 64,
    }
    IdempotentRequest.objects.create(
        integration=IntegrationKey.objects.get(),
        key="k-1",
        request_hash=idempotency.request_hash("POST", f"{APP}/plans", body),
    )

    answer = Client().post(
        f"{APP}/plans", body, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_IDEMPOTENCY_KEY="k-1",
    )  # fmt: skip

    assert answer.status_code == 409 and error_code(answer) == "idempotency_key_in_use"
    assert answer["Retry-After"] == "1"


def test_a_key_left_by_a_request_that_died_is_taken_over(db):
    key = mint()
    body = {
        "name": "Small",
        "memory_mb": 1024,
        "disk_mb": 1024,
        "cpu_percent": 100,
        "processes": 64,
    }
    with freezegun.freeze_time(timezone.now() - idempotency.STALE_AFTER - timedelta(seconds=1)):
        IdempotentRequest.objects.create(
            integration=IntegrationKey.objects.get(),
            key="k-1",
            request_hash=idempotency.request_hash("POST", f"{APP}/plans", body),
        )

    answer = Client().post(
        f"{APP}/plans", body, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_IDEMPOTENCY_KEY="k-1",
    )  # fmt: skip

    assert answer.status_code == 201
    assert IdempotentRequest.objects.get().status_code == 201
