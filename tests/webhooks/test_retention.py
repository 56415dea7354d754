"""Delivery history retention and the django-q2 schedules that run it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from django_q.models import Schedule
from freezegun import freeze_time

from gshost.schedules import ensure_schedules
from tests.webhooks.delivery_fixtures import (
    Hooks,
)
from webhooks import tasks
from webhooks.models import Delivery, DeliveryAttempt


def test_it_purges_deliveries_and_attempts_older_than_seven_days(hooks: Hooks) -> None:
    webhook = hooks.webhook()
    with freeze_time("2026-11-01 12:00:00"):
        old = hooks.delivery(webhook, created_at=timezone.now())
        DeliveryAttempt.objects.create(delivery=old, number=1, trigger="automatic",
                                       started_at=timezone.now())  # fmt: skip
    with freeze_time("2026-11-02 12:00:01"):
        kept = hooks.delivery(webhook, created_at=timezone.now())

    with freeze_time("2026-11-09 12:00:00"):
        assert tasks.purge_delivery_history() == 1

    assert list(Delivery.objects.values_list("id", flat=True)) == [kept.id]
    assert not DeliveryAttempt.objects.exists()


def test_it_purges_in_batches(hooks: Hooks, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("webhooks.retention.PURGE_BATCH", 3)
    webhook = hooks.webhook()
    old = timezone.now() - timedelta(days=8)
    for _ in range(7):
        hooks.delivery(webhook, created_at=old)

    assert tasks.purge_delivery_history() == 7
    assert not Delivery.objects.exists()


@pytest.mark.django_db
def test_migrate_schedules_the_purges_and_the_servers_tick_but_no_sweep() -> None:
    schedules = {s.name: s for s in Schedule.objects.all()}

    assert "webhooks.sweep" not in schedules  # the engine's timer does that work
    assert schedules["webhooks.purge_history"].func == "webhooks.tasks.purge_delivery_history"
    assert schedules["webhooks.purge_history"].schedule_type == Schedule.HOURLY
    assert schedules["audit.purge_expired"].func == "audit.services.audit_purge_expired"
    assert schedules["audit.purge_expired"].schedule_type == Schedule.HOURLY
    tick = schedules["servers.tick"]
    assert (tick.func, tick.schedule_type, tick.minutes) == (
        "servers.tasks.tick",
        Schedule.MINUTES,
        1,
    )


@pytest.mark.django_db
def test_scheduling_again_corrects_rows_without_duplicating_them() -> None:
    Schedule.objects.filter(name="servers.tick").update(minutes=5, func="old.path")
    Schedule.objects.create(name="servers.tick", func="duplicate", schedule_type="I", minutes=1)
    next_run = Schedule.objects.get(name="audit.purge_expired").next_run

    ensure_schedules()
    call_command("migrate", verbosity=0)  # the post_migrate hook runs it too

    (tick,) = Schedule.objects.filter(name="servers.tick")
    assert (tick.func, tick.minutes) == ("servers.tasks.tick", 1)
    assert (
        Schedule.objects.filter(name__in=["webhooks.purge_history", "audit.purge_expired"]).count()
        == 2
    )
    assert Schedule.objects.get(name="audit.purge_expired").next_run == next_run


@pytest.mark.django_db
def test_migrate_deletes_the_retired_minute_sweep_schedule() -> None:
    Schedule.objects.create(
        name="webhooks.sweep",
        func="webhooks.tasks.sweep_deliveries",
        schedule_type=Schedule.MINUTES,
        minutes=1,
    )

    call_command("migrate", verbosity=0)

    assert not Schedule.objects.filter(name="webhooks.sweep").exists()
