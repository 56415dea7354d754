"""The django-q2 schedules the service needs, created or corrected after every migrate.

Keyed by name, so running migrate again (or changing a definition here) updates the rows in
place instead of adding duplicates; ``next_run`` of an existing schedule is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from django.db import DEFAULT_DB_ALIAS, connections, router, transaction
from django_q.models import Schedule


@dataclass(frozen=True)
class Definition:
    name: str
    func: str
    schedule_type: str
    minutes: int | None = None


SCHEDULES: Final = (
    # Every minute a ~60 s task polls for due deliveries and expired leases (see engine.sweep).
    Definition("webhooks.sweep", "webhooks.tasks.sweep_deliveries", Schedule.MINUTES, 1),
    Definition("webhooks.purge_history", "webhooks.tasks.purge_delivery_history", Schedule.HOURLY),
    Definition("audit.purge_expired", "audit.services.audit_purge_expired", Schedule.HOURLY),
)


def ensure_schedules(using: str = DEFAULT_DB_ALIAS) -> None:
    with transaction.atomic(using=using):
        for definition in SCHEDULES:
            _ensure(definition, using)


def _ensure(definition: Definition, using: str) -> None:
    fields = {
        "func": definition.func,
        "schedule_type": definition.schedule_type,
        "minutes": definition.minutes,
        "repeats": -1,
        "args": None,
        "kwargs": None,
    }
    rows = list(Schedule.objects.using(using).filter(name=definition.name).order_by("id"))
    if not rows:
        Schedule.objects.using(using).create(name=definition.name, **fields)
        return
    first, extra = rows[0], rows[1:]
    Schedule.objects.using(using).filter(id__in=[row.id for row in extra]).delete()
    if any(getattr(first, field) != value for field, value in fields.items()):
        Schedule.objects.using(using).filter(id=first.id).update(**fields)


def on_post_migrate(using: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> None:
    """post_migrate receiver; does nothing until django_q's tables exist on that database."""
    if not router.allow_migrate_model(using, Schedule):
        return
    if Schedule._meta.db_table not in connections[using].introspection.table_names():
        return
    ensure_schedules(using)
