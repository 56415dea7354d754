"""Command schedules: cron (UTC) runs of a console command, Run Now, alerts and missed runs.

Each run fires command_schedule.executed. A run whose status the schedule alerts on fires
command_schedule.alert (reason run_status) and emails the schedule's creator. A schedule
whose slots pass without a run (the worker was down) catches up with one run for the latest
slot; the slots before it are missed, and `alert_after_missed` of them in a row fire one
alert (reason missed_runs). While the server is suspended its schedules cannot be changed or
run now (409 server_suspended), and their runs are `skipped`, saying so.
"""

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from croniter import croniter
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from accounts.models import User
from audit.actors import Actor
from audit.services import PanelAction
from gshost.errors import InvalidInput
from servers import events
from servers.errors import (
    InvalidSchedule,
    InvalidState,
    NodeRefused,
    NodeUnavailable,
    ServerSuspended,
)
from servers.models import (
    ALERTABLE_STATUSES,
    RunStatus,
    RunTrigger,
    Schedule,
    ScheduleRun,
    Server,
)
from servers.services import clean_command, command_deliver
from servers.suspension import refuse_if_suspended
from webhooks.events import Event

logger = logging.getLogger(__name__)

MAX_SLOTS_COUNTED = 100_000  # a per-minute schedule left alone for ten weeks
MAX_ALERT_AFTER_MISSED = 1000


def clean_cron(cron: str) -> str:
    """Five fields (minute hour day-of-month month day-of-week), evaluated in UTC."""
    cron = " ".join(cron.split())
    if len(cron.split(" ")) != 5 or not croniter.is_valid(cron):
        raise InvalidSchedule("A cron expression has five fields, like '*/15 * * * *'.")
    return cron


def next_slot(cron: str, after: datetime) -> datetime:
    moment: datetime = croniter(cron, after).get_next(datetime)
    return moment


@dataclass(frozen=True)
class ScheduleInput:
    name: str
    cron: str
    command: str
    enabled: bool = True
    alert_on: tuple[str, ...] = ()
    alert_after_missed: int = 3

    def cleaned(self) -> "ScheduleInput":
        name = self.name.strip()
        if not name or len(name) > 100:
            raise InvalidSchedule("A schedule needs a name of at most 100 characters.")
        if not set(self.alert_on) <= set(ALERTABLE_STATUSES):
            raise InvalidSchedule(f"alert_on is a subset of {', '.join(ALERTABLE_STATUSES)}.")
        if not 1 <= self.alert_after_missed <= MAX_ALERT_AFTER_MISSED:
            raise InvalidSchedule(f"alert_after_missed is from 1 to {MAX_ALERT_AFTER_MISSED}.")
        return ScheduleInput(
            name=name,
            cron=clean_cron(self.cron),
            command=clean_command(self.command),
            enabled=self.enabled,
            alert_on=tuple(s for s in ALERTABLE_STATUSES if s in self.alert_on),
            alert_after_missed=self.alert_after_missed,
        )


def _fields(data: ScheduleInput, now: datetime) -> dict[str, Any]:
    return {
        "name": data.name,
        "cron": data.cron,
        "command": data.command,
        "enabled": data.enabled,
        "alert_on": list(data.alert_on),
        "alert_after_missed": data.alert_after_missed,
        "next_run_at": next_slot(data.cron, now) if data.enabled else None,
        "missed_in_a_row": 0,
        "updated_at": now,
    }


def _audit(actor: Actor, server: Server) -> None:
    actor.audit(
        organization_id=server.organization_id,
        action=PanelAction.SERVER_UPDATE,
        server_id=server.id,
    )


def schedule_create(
    *, server: Server, data: ScheduleInput, created_by: User | None, actor: Actor
) -> Schedule:
    data = data.cleaned()
    refuse_if_suspended(server)
    with transaction.atomic():
        now = timezone.now()
        schedule = Schedule.objects.create(
            server=server, created_by=created_by, created_at=now, **_fields(data, now)
        )
        _audit(actor, server)
    return schedule


def schedule_update(*, schedule: Schedule, data: ScheduleInput, actor: Actor) -> Schedule:
    """New settings; the next slot is counted afresh from now (nothing is caught up)."""
    data = data.cleaned()
    refuse_if_suspended(schedule.server)
    with transaction.atomic():
        fields = _fields(data, timezone.now())
        Schedule.objects.filter(id=schedule.id).update(**fields)
        _audit(actor, schedule.server)
    schedule.refresh_from_db()
    return schedule


def schedule_set_enabled(*, schedule: Schedule, enabled: bool, actor: Actor) -> Schedule:
    current = ScheduleInput(
        name=schedule.name,
        cron=schedule.cron,
        command=schedule.command,
        enabled=enabled,
        alert_on=tuple(schedule.alert_on),
        alert_after_missed=schedule.alert_after_missed,
    )
    return schedule_update(schedule=schedule, data=current, actor=actor)


def schedule_delete(*, schedule: Schedule, actor: Actor) -> None:
    refuse_if_suspended(schedule.server)
    with transaction.atomic():
        _audit(actor, schedule.server)
        schedule.delete()


def schedule_run_now(*, schedule: Schedule, actor: Actor) -> ScheduleRun:
    """Run Now, whether or not the schedule is enabled; its timing is left alone."""
    refuse_if_suspended(schedule.server)
    sent = _send(schedule, schedule.server)
    with transaction.atomic():
        run = _record_run(schedule, RunTrigger.RUN_NOW, None, sent)
        _audit(actor, schedule.server)
    return run


def schedules_run_due(now: datetime | None = None) -> int:
    """Run every enabled schedule whose slot has come; returns how many ran."""
    now = now or timezone.now()
    due = Schedule.objects.filter(
        enabled=True, next_run_at__lte=now, server__delete_requested_at__isnull=True
    )
    ran = 0
    for schedule in due.select_related("server", "created_by").order_by("next_run_at"):
        ran += _run_due(schedule, now)
    return ran


def _run_due(schedule: Schedule, now: datetime) -> int:
    slots, following = _slots_until(schedule, now)
    with transaction.atomic():
        claimed = Schedule.objects.filter(
            id=schedule.id, enabled=True, next_run_at=schedule.next_run_at
        ).update(next_run_at=following)
        if claimed != 1:
            return 0  # another sweep took this slot
        missed = len(slots) - 1
        if missed:
            _count_missed(schedule, missed)
    sent = _send(schedule, schedule.server)  # the slot is claimed and committed: call now
    with transaction.atomic():
        _record_run(schedule, RunTrigger.SCHEDULE, slots[-1], sent)
    return 1


def _slots_until(schedule: Schedule, now: datetime) -> tuple[list[datetime], datetime]:
    """The slots from `next_run_at` up to now (capped), and the first slot after now."""
    assert schedule.next_run_at is not None
    slots = [schedule.next_run_at]
    iterator = croniter(schedule.cron, schedule.next_run_at)
    following: datetime = iterator.get_next(datetime)
    while following <= now:
        if len(slots) < MAX_SLOTS_COUNTED:
            slots.append(following)
        else:
            slots[-1] = following
        following = iterator.get_next(datetime)
    return slots, following


def _count_missed(schedule: Schedule, missed: int) -> None:
    before = schedule.missed_in_a_row
    after = before + missed
    Schedule.objects.filter(id=schedule.id).update(missed_in_a_row=after)
    if before < schedule.alert_after_missed <= after:
        _alert(schedule, reason="missed_runs", missed_runs=after)


def _record_run(
    schedule: Schedule,
    trigger: RunTrigger,
    scheduled_for: datetime | None,
    sent: tuple[RunStatus, str],
) -> ScheduleRun:
    server = schedule.server
    status, output = sent
    now = timezone.now()
    run = ScheduleRun.objects.create(
        schedule=schedule,
        trigger=trigger,
        status=status,
        command=schedule.command,
        scheduled_for=scheduled_for,
        ran_at=now,
        output=output[:5000],
    )
    updates: dict[str, Any] = {"last_run_at": now}
    if trigger == RunTrigger.SCHEDULE:
        updates["missed_in_a_row"] = 0
    Schedule.objects.filter(id=schedule.id).update(**updates)
    data = {
        "schedule_id": schedule.id,
        "schedule_name": schedule.name,
        "run_id": run.id,
        "trigger": trigger.value,
        "status": status.value,
    }
    events.publish(server, Event.COMMAND_SCHEDULE_EXECUTED, data, occurred_at=now)
    if status.value in schedule.alert_on:
        _alert(schedule, reason="run_status", run=run)
    return run


def _send(schedule: Schedule, server: Server) -> tuple[RunStatus, str]:
    actor = Actor.system(f"schedule {schedule.id}")
    try:
        sent = command_deliver(server=server, command=schedule.command, actor=actor)
    except (NodeUnavailable, NodeRefused, InvalidInput) as refused:  # unreachable, or refused
        return RunStatus.FAILED, refused.message
    except (InvalidState, ServerSuspended) as refused:  # not running or suspended: skipped
        return RunStatus.SKIPPED, refused.message
    return (RunStatus.SUCCEEDED if sent.accepted else RunStatus.FAILED), sent.output


def _alert(
    schedule: Schedule,
    *,
    reason: str,
    run: ScheduleRun | None = None,
    missed_runs: int | None = None,
) -> None:
    data = {
        "schedule_id": schedule.id,
        "schedule_name": schedule.name,
        "reason": reason,
        "run_id": run.id if run else None,
        "status": run.status if run else None,
        "missed_runs": missed_runs,
    }
    events.publish(schedule.server, Event.COMMAND_SCHEDULE_ALERT, data)
    creator = schedule.created_by
    if creator is not None and creator.email:
        subject, body = _alert_email(schedule, data)
        transaction.on_commit(lambda: _send_email(creator.email, subject, body))


def _alert_email(schedule: Schedule, data: dict[str, Any]) -> tuple[str, str]:
    server = schedule.server
    if data["reason"] == "missed_runs":
        what = f"missed {data['missed_runs']} runs in a row"
    else:
        what = f"run {data['run_id']} ended {data['status']}"
    subject = f"[gshost] Schedule “{schedule.name}” on {server.name}: {what}"
    body = "\n".join(
        [
            f"The command schedule “{schedule.name}” ({schedule.id}) {what}.",
            f"Server: {server.name} ({server.id}), now {server.state}.",
            f"Cron (UTC): {schedule.cron}",
            f"Command: {schedule.command}",
            "",
            "You receive this because you created the schedule.",
        ]
    )
    return subject, body


def _send_email(to: str, subject: str, body: str) -> None:
    try:
        send_mail(subject, body, None, [to])
    except Exception:  # mail trouble must not undo or repeat the run
        logger.exception("Could not email the schedule alert to %s", to)
