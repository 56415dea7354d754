"""The engine's parts on their own: the retry policy, the timer, the recorder's bound, and
hand-offs that never raise into the caller."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from django.db import transaction
from django.utils import timezone
from freezegun import freeze_time

from gshost import handoff
from tests.webhooks.delivery_fixtures import (
    Hooks,
    wait_for,
)
from webhooks import dispatch
from webhooks.delivery import claims, policy, recorder
from webhooks.delivery.claims import Claim, Finished
from webhooks.delivery.engine import offer_round
from webhooks.delivery.pool import DeliveryPool
from webhooks.delivery.timer import Timer
from webhooks.delivery.transport import AttemptResult
from webhooks.models import AttemptError, AttemptTrigger, DeliveryStatus

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)

# --- policy ---------------------------------------------------------------------------------


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

    first = policy.after_automatic_attempt(attempts_made=1, status_code=503, error=None, now=NOW)
    second = policy.after_automatic_attempt(attempts_made=2, status_code=503, error=None, now=NOW)

    assert first == policy.NextStep(DeliveryStatus.RETRY_SCHEDULED, NOW + timedelta(seconds=5))
    assert second == policy.NextStep(DeliveryStatus.RETRY_SCHEDULED, NOW + timedelta(seconds=60))


def test_it_fails_the_delivery_after_the_last_retry(settings: Any) -> None:
    settings.WEBHOOK_RETRY_DELAYS = [5, 60]

    step = policy.after_automatic_attempt(attempts_made=3, status_code=503, error=None, now=NOW)

    assert step == policy.NextStep(DeliveryStatus.FAILED, None)


@pytest.mark.parametrize("error", sorted(policy.FINAL_ERRORS))
def test_it_fails_at_once_on_a_final_error(error: str) -> None:
    step = policy.after_automatic_attempt(attempts_made=1, status_code=None, error=error, now=NOW)

    assert step.status == DeliveryStatus.FAILED


def test_it_labels_the_last_error_with_the_error_or_the_status() -> None:
    assert policy.error_label(200, None) == ""
    assert policy.error_label(503, None) == "status_503"
    assert policy.error_label(None, AttemptError.TLS_ERROR) == "tls_error"


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


# --- timer ------------------------------------------------------------------------------------


class Rounds:
    def __init__(self, answers: list[float | None]) -> None:
        self.answers = answers
        self.count = 0
        self.exits = 0

    def round(self) -> float | None:
        self.count += 1
        return self.answers.pop(0) if self.answers else None

    def exit(self) -> None:
        self.exits += 1


def test_the_timer_comes_back_when_the_next_row_is_due_not_after_its_poll() -> None:
    rounds = Rounds([0.2])
    timer = Timer(on_round=rounds.round, on_exit=rounds.exit, poll=3600)

    wait_for(lambda: rounds.count == 2)
    timer.stop()


def test_the_timer_runs_a_round_when_woken() -> None:
    rounds = Rounds([])
    timer = Timer(on_round=rounds.round, on_exit=rounds.exit, poll=3600)
    wait_for(lambda: rounds.count == 1)

    timer.wake()

    wait_for(lambda: rounds.count == 2)
    timer.stop()


def test_the_timer_keeps_going_after_a_failed_round() -> None:
    calls: list[int] = []

    def failing() -> float | None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database went away")
        return None

    timer = Timer(on_round=failing, on_exit=lambda: None, poll=3600)

    wait_for(lambda: len(calls) == 2)
    timer.stop()


def test_stopping_the_timer_runs_its_exit_once() -> None:
    rounds = Rounds([])
    timer = Timer(on_round=rounds.round, on_exit=rounds.exit, poll=3600)

    assert timer.stop(timeout=10)
    timer.stop(timeout=10)

    assert rounds.exits == 1


def test_the_timer_runs_its_exit_when_the_main_thread_ends(tmp_path: Path) -> None:
    marker = tmp_path / "exited"
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from webhooks.delivery.timer import Timer
        Timer(on_round=lambda: None, on_exit=lambda: Path({str(marker)!r}).write_text("yes"))
        """
    )

    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, cwd=ROOT)

    assert marker.read_text() == "yes"


# --- recorder bound ----------------------------------------------------------------------------


def finished_attempt(delivery_id: str) -> Finished:
    """A stand-in for a finished attempt, for a recorder whose writing is replaced."""
    return Finished(
        cast(Claim, SimpleNamespace(delivery_id=delivery_id)), cast(AttemptResult, None)
    )


def test_a_batch_holding_one_delivery_twice_is_written_in_parts_in_order() -> None:
    first, other, second = (finished_attempt(d) for d in ("dlv_a", "dlv_b", "dlv_a"))

    assert recorder.one_per_delivery([first, other, second]) == [[first, other], [second]]


def test_the_recorder_writes_attempts_finished_together_as_one_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batches: list[int] = []
    recorded: list[int] = []

    def record(batch: list[Finished]) -> list[tuple[str, str]]:
        batches.append(len(batch))
        return []

    monkeypatch.setattr(recorder, "record_attempts", record)
    monkeypatch.setattr(recorder, "RECORD_LINGER_SECONDS", 5.0)  # all three arrive in time
    writer = recorder.Recorder(on_recorded=recorded.append, on_due_again=lambda due: None)
    finished = [finished_attempt(f"dlv_{n}") for n in range(3)]

    for done in finished:
        writer.put(done)
    assert writer.stop(timeout=10)

    assert batches == [3]
    assert recorded == [3]


def test_the_recorder_writes_a_batch_at_once_when_the_pool_has_stopped_claiming(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written = threading.Event()
    batches: list[int] = []

    def record(batch: list[Finished]) -> list[tuple[str, str]]:
        batches.append(len(batch))
        written.set()
        return []

    monkeypatch.setattr(recorder, "record_attempts", record)
    monkeypatch.setattr(recorder, "RECORD_LINGER_SECONDS", 60.0)  # never reached in this test
    writer = recorder.Recorder(
        on_recorded=lambda count: None, on_due_again=lambda due: None, claims_stop_at=3
    )
    try:
        for n in range(3):
            writer.put(finished_attempt(f"dlv_{n}"))

        assert written.wait(timeout=30), "the batch waited for the linger"
        assert batches == [3]
    finally:
        assert writer.stop(timeout=10)


def test_an_attempt_that_waited_behind_a_write_is_written_without_a_further_linger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The recorder's own clock (freezegun does not reach into its thread).
    now = [1000.0]
    monkeypatch.setattr(
        recorder, "time", SimpleNamespace(monotonic=lambda: now[0], sleep=time.sleep)
    )
    first_write_started, first_write_may_end = threading.Event(), threading.Event()
    second_written = threading.Event()
    batches: list[int] = []

    def record(batch: list[Finished]) -> list[tuple[str, str]]:
        batches.append(len(batch))
        if len(batches) == 1:
            first_write_started.set()
            first_write_may_end.wait(timeout=30)
        else:
            second_written.set()
        return []

    monkeypatch.setattr(recorder, "record_attempts", record)
    monkeypatch.setattr(recorder, "RECORD_LINGER_SECONDS", 60.0)
    writer = recorder.Recorder(
        on_recorded=lambda count: None, on_due_again=lambda due: None, claims_stop_at=2
    )
    try:
        writer.put(finished_attempt("dlv_1"))
        writer.put(finished_attempt("dlv_2"))  # two: the cap, so written at once
        assert first_write_started.wait(timeout=30)
        writer.put(finished_attempt("dlv_3"))
        now[0] += 61  # dlv_3 has had its linger while the first batch was being written
        first_write_may_end.set()

        assert second_written.wait(timeout=30), "dlv_3 lingered again after the write"
        assert batches == [2, 1]
    finally:
        first_write_may_end.set()
        assert writer.stop(timeout=10)


def test_the_pool_claims_nothing_while_the_recorder_is_behind() -> None:
    pool = DeliveryPool(threads=4, per_webhook=4, max_finished_unrecorded=2)
    try:
        with pool._cond:
            pool._unrecorded = 2  # two finished attempts waiting for the recorder
            pool._enqueue([("dlv_a", "whk_a")])

        assert pool._reserve() == []

        with pool._cond:
            pool._unrecorded = 1
        assert pool._reserve() == [("dlv_a", "whk_a")]
    finally:
        with pool._cond:
            pool._unrecorded = pool._busy = 0
            pool._on_wire.clear()
        pool.close(timeout=5)


def test_the_pool_claims_at_once_when_a_recorded_batch_ends_a_pause_in_claiming() -> None:
    pool = DeliveryPool(threads=4, per_webhook=4, max_finished_unrecorded=2)
    try:
        with pool._cond:  # held throughout, so the dispatcher cannot take the flag meanwhile
            pool._unrecorded = 3  # three finished attempts waiting: claiming has stopped

            pool._release_recorded(2)

            assert pool._urgent  # the dispatcher skips its gathering pause
    finally:
        with pool._cond:
            pool._unrecorded = pool._busy = 0
        pool.close(timeout=5)


def test_offered_rows_are_claimed_without_the_gathering_pause() -> None:
    """A timer round's page arrives at once, like a task's rows: nothing to gather for."""
    pool = DeliveryPool(threads=4, per_webhook=4)
    try:
        with pool._cond:  # held throughout, so the dispatcher cannot take the flag meanwhile
            pool._urgent = False

            pool.offer([("dlv_a", "whk_a")])

            assert pool._urgent
            pool._waiting.clear()  # nothing for the dispatcher to claim afterwards
            pool._waiting_ids.clear()
    finally:
        pool.close(timeout=5)


def test_a_recorded_batch_does_not_hurry_a_pool_that_was_claiming() -> None:
    pool = DeliveryPool(threads=4, per_webhook=4, max_finished_unrecorded=2)
    try:
        with pool._cond:  # held throughout, so the dispatcher cannot take the flag meanwhile
            pool._unrecorded = 1
            pool._urgent = False

            pool._release_recorded(1)

            assert not pool._urgent
    finally:
        with pool._cond:
            pool._unrecorded = pool._busy = 0
        pool.close(timeout=5)


def test_an_empty_offer_does_not_wake_the_dispatcher() -> None:
    """The pool's hunger wakes the timer, whose round may offer nothing: if that woke the
    dispatcher, which then reports hunger again, the two would loop."""
    hungry: list[bool] = []
    pool = DeliveryPool(threads=2, per_webhook=1, on_hungry=lambda: hungry.append(True))
    try:
        for _ in range(100):
            pool.offer([])
        time.sleep(0.3)  # many dispatcher rounds, had any been woken

        assert hungry == []
    finally:
        pool.close(timeout=5)


# --- hand-offs ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_hand_off_the_broker_refuses_is_counted_and_never_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broker_down(*args: Any) -> None:
        raise ConnectionError("Connection refused")

    monkeypatch.setattr(dispatch, "async_task", broker_down)

    with transaction.atomic():
        dispatch.request_attempts([("dlv_1", "whk_1")])

    assert handoff.failed_count() == 1


def test_catch_ups_keep_running_when_one_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def failing() -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(handoff, "_catch_ups", [failing, lambda: ran.append("ran")])

    handoff.run_catch_ups()

    assert ran == ["ran"]


def test_only_one_thread_owns_the_engine_lifecycle() -> None:
    rounds = Rounds([])
    timer = Timer(on_round=rounds.round, on_exit=rounds.exit, poll=3600)
    names = [t.name for t in threading.enumerate() if not t.daemon and t.name == "webhook-timer"]
    timer.stop()

    assert names == ["webhook-timer"]


# --- the timer's question ------------------------------------------------------------------


@pytest.mark.django_db
def test_the_next_due_moment_is_the_earliest_scheduled_attempt_or_lease_end(
    hooks: Hooks,
) -> None:
    now = timezone.now()
    webhook = hooks.webhook()
    hooks.delivery(webhook, next_attempt_at=now - timedelta(seconds=5))  # due: not "next"
    hooks.delivery(webhook, next_attempt_at=now + timedelta(seconds=30))
    hooks.delivery(
        webhook,
        next_attempt_at=now - timedelta(seconds=1),
        lease_expires_at=now + timedelta(seconds=12),
    )
    hooks.delivery(webhook, status=DeliveryStatus.SUCCESS, next_attempt_at=None)

    assert claims.next_due_at(now) == now + timedelta(seconds=12)


@pytest.mark.django_db
def test_there_is_no_next_due_moment_when_nothing_waits(hooks: Hooks) -> None:
    hooks.delivery(hooks.webhook(), status=DeliveryStatus.SUCCESS, next_attempt_at=None)

    assert claims.next_due_at(timezone.now()) is None


@pytest.mark.django_db
def test_a_row_falling_due_while_a_round_offers_brings_the_next_round_at_once(
    hooks: Hooks,
) -> None:
    with freeze_time(NOW) as clock:
        hooks.delivery(hooks.webhook(), next_attempt_at=NOW + timedelta(milliseconds=5))

        def offer_while_time_passes() -> int:
            clock.tick(timedelta(milliseconds=10))  # the row falls due during the offer
            return 0

        until_due = offer_round(offer_while_time_passes)

    assert until_due is not None
    assert until_due <= 0


# --- riding on django-q2's processes ------------------------------------------------------------

_FORK_MASKS = """
import os, signal, sys
from webhooks.delivery.process import shield_cluster_children
shield_cluster_children([sys.argv[1], sys.argv[2]])
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
        ("qcluster", "child-blocked parent-open"),
        ("runserver", "child-open parent-open"),
    ],
)
def test_only_qclusters_children_are_forked_with_sigterm_blocked(
    command: str, expected: str
) -> None:
    run = subprocess.run(
        [sys.executable, "-c", _FORK_MASKS, "manage.py", command],
        check=True, capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip

    assert run.stdout.strip() == expected


_SHIELDED_WORKER = """
import logging, signal, sys, time
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s", force=True)
from webhooks.delivery.process import route_sigterm
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # as the cluster forks it
route_sigterm()
try:  # the line below inside it: the SIGTERM can land as soon as the line is read
    print("in the task loop", flush=True)
    while True:
        time.sleep(0.05)
except SystemExit:
    print("left the task loop", flush=True)
    raise
"""

_SEND_SIGTERM = "import os, signal, sys; os.kill(int(sys.argv[1]), signal.SIGTERM)"


@pytest.fixture(name="shielded_worker")
def shielded_worker_fixture() -> Iterator[subprocess.Popen[str]]:
    worker = subprocess.Popen(
        [sys.executable, "-c", _SHIELDED_WORKER], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "in the task loop"
    yield worker
    worker.kill()
    worker.wait()


def test_it_leaves_the_task_loop_at_a_sigterm_from_its_parent(
    shielded_worker: subprocess.Popen[str],
) -> None:
    shielded_worker.send_signal(signal.SIGTERM)  # this process is its parent, as the sentinel

    assert shielded_worker.wait(timeout=60) == 0
    assert shielded_worker.stdout is not None
    assert shielded_worker.stdout.read().strip() == "left the task loop"


def test_it_leaves_a_sigterm_from_elsewhere_to_the_clusters_orderly_stop(
    shielded_worker: subprocess.Popen[str],
) -> None:
    sender = subprocess.Popen([sys.executable, "-c", _SEND_SIGTERM, str(shielded_worker.pid)])
    sender.wait(timeout=60)

    assert shielded_worker.stdout is not None
    assert shielded_worker.stdout.readline().strip() == (
        f"SIGTERM from pid {sender.pid} left to the cluster's orderly stop"
    )
    assert shielded_worker.poll() is None
