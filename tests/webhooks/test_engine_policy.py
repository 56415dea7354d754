"""The engine's parts on their own: the retry policy, hand-offs that never raise into the
caller, and the SIGTERM shield of the cluster's children."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from tests.metric_samples import sample
from webhooks import dispatch
from webhooks.delivery import policy
from webhooks.models import AttemptError, AttemptTrigger, DeliveryStatus

ROOT = Path(__file__).resolve().parents[2]
FAILED = "gshost_handoffs_failed_total"
NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)

# --- policy ---------------------------------------------------------------------------------

PENDING = policy.DeliveryState(
    status=DeliveryStatus.PENDING,
    next_attempt_at=NOW,
    automatic_attempts=0,
    last_error="",
    completed_at=None,
)
GAVE_UP = policy.DeliveryState(
    status=DeliveryStatus.FAILED,
    next_attempt_at=None,
    automatic_attempts=6,
    last_error="status_503",
    completed_at=None,
)


def after(state: policy.DeliveryState, trigger: AttemptTrigger, code: int) -> policy.DeliveryState:
    return policy.after_attempt(state, trigger=trigger, status_code=code, error=None, now=NOW)


@pytest.mark.parametrize(
    ("status_code", "error", "expected"),
    [
        (200, None, True),
        (204, None, True),
        (299, None, True),
        (302, AttemptError.REDIRECT, False),
        (404, None, False),
        (500, None, False),
        (None, AttemptError.TIMEOUT, False),
    ],
)
def test_it_counts_only_a_2xx_answer_without_error_as_success(
    status_code: int | None, error: str | None, expected: bool
) -> None:
    assert policy.is_success(status_code, error) is expected


def test_it_schedules_the_next_attempt_by_the_configured_delays(settings: Any) -> None:
    settings.WEBHOOK_RETRY_DELAYS = [5, 60]

    first = after(PENDING, AttemptTrigger.AUTOMATIC, 503)
    second = after(first, AttemptTrigger.AUTOMATIC, 503)

    assert (first.status, first.next_attempt_at) == ("retry_scheduled", NOW + timedelta(seconds=5))
    assert second.next_attempt_at == NOW + timedelta(seconds=60)


def test_it_fails_the_delivery_after_the_last_retry(settings: Any) -> None:
    settings.WEBHOOK_RETRY_DELAYS = [5, 60]
    retried_twice = replace(PENDING, status=DeliveryStatus.RETRY_SCHEDULED, automatic_attempts=2)

    state = after(retried_twice, AttemptTrigger.AUTOMATIC, 503)

    assert (state.status, state.next_attempt_at, state.automatic_attempts) == ("failed", None, 3)


@pytest.mark.parametrize("error", sorted(policy.FINAL_ERRORS))
def test_it_fails_at_once_on_a_final_error(error: str) -> None:
    state = policy.after_attempt(
        PENDING, trigger=AttemptTrigger.AUTOMATIC, status_code=None, error=error, now=NOW
    )

    assert (state.status, state.last_error) == ("failed", error)


def test_it_labels_the_last_error_with_the_error_or_the_status() -> None:
    assert policy.error_label(200, None) == ""
    assert policy.error_label(503, None) == "status_503"
    assert policy.error_label(None, AttemptError.TLS_ERROR) == "tls_error"


def test_an_automatic_attempt_moves_the_row_along_its_retry_plan(settings: Any) -> None:
    settings.WEBHOOK_RETRY_DELAYS = [5, 60]

    state = after(PENDING, AttemptTrigger.AUTOMATIC, 503)

    assert state == policy.DeliveryState(
        status=DeliveryStatus.RETRY_SCHEDULED,
        next_attempt_at=NOW + timedelta(seconds=5),
        automatic_attempts=1,
        last_error="status_503",
        completed_at=None,
    )


def test_a_successful_automatic_attempt_completes_the_delivery() -> None:
    state = after(PENDING, AttemptTrigger.AUTOMATIC, 200)

    assert (state.status, state.completed_at, state.last_error) == ("success", NOW, "")


def test_a_successful_redelivery_settles_a_failed_delivery_without_counting_an_attempt() -> None:
    state = after(GAVE_UP, AttemptTrigger.REDELIVERY, 200)

    assert (state.status, state.automatic_attempts, state.completed_at) == ("success", 6, NOW)


def test_a_failed_redelivery_leaves_the_retry_plan_as_it_was() -> None:
    assert after(PENDING, AttemptTrigger.REDELIVERY, 503) == PENDING


def test_an_automatic_attempt_on_a_settled_delivery_changes_nothing() -> None:
    assert after(GAVE_UP, AttemptTrigger.AUTOMATIC, 200) == GAVE_UP


def test_a_redelivery_keeps_the_time_of_the_first_success() -> None:
    earlier = NOW - timedelta(hours=1)
    succeeded = policy.DeliveryState("success", None, 1, "", earlier)

    assert after(succeeded, AttemptTrigger.REDELIVERY, 200).completed_at == earlier


# --- hand-offs ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_hand_off_the_broker_refuses_is_counted_and_never_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broker_down(*args: Any) -> None:
        raise ConnectionError("Connection refused")

    monkeypatch.setattr(dispatch, "async_task", broker_down)
    before = sample(FAILED, task="webhooks.tasks.attempt_deliveries")

    with transaction.atomic():
        dispatch.request_attempts([("dlv_1", "whk_1")])

    assert sample(FAILED, task="webhooks.tasks.attempt_deliveries") == before + 1


# --- riding on django-q2's processes ------------------------------------------------------------

_FORK_MASKS = """
import os, signal, sys
from gshost import process_state
from webhooks.delivery.process import shield_cluster_children
shield_cluster_children([sys.argv[1], sys.argv[2]])
if sys.argv[3:] == ["reset"]:
    process_state.reset_all()
read, write = os.pipe()
if os.fork() == 0:
    blocked = signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    os.write(write, b"child-blocked" if blocked else b"child-open")
    os._exit(0)
os.wait()
parent = signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
print(os.read(read, 32).decode(), "parent-blocked" if parent else "parent-open")
"""


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["qcluster"], "child-blocked parent-open"),
        (["runserver"], "child-open parent-open"),
        (["qcluster", "reset"], "child-open parent-open"),  # process state reset: no shield
    ],
)
def test_only_qclusters_children_are_forked_with_sigterm_blocked(
    command: list[str], expected: str
) -> None:
    run = subprocess.run(
        [sys.executable, "-c", _FORK_MASKS, "manage.py", *command],
        check=True, capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip

    assert run.stdout.strip() == expected
