"""The django-q2 schedules the service needs, created or corrected after every migrate.

Each app declares its own in its ``ready()`` with ``schedule_after_migrate``. Keyed by name,
so running migrate again (or changing a definition) updates the rows in place instead of
adding duplicates; ``next_run`` of an existing schedule is left alone. Names given as
``retired`` (schedules earlier versions created) are deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.apps import AppConfig
from django.db import DEFAULT_DB_ALIAS, connections, router, transaction
from django.db.models.signals import post_migrate


@dataclass(frozen=True)
class Definition:
    name: str
    func: str
    schedule_type: str
    minutes: int | None = None


_declared: list[Definition] = []
_retired: list[str] = []


def schedule_after_migrate(
    app: AppConfig, *definitions: Definition, retired: Iterable[str] = ()
) -> None:
    """Create or correct ``definitions``, and delete schedules named in ``retired``, after
    every migrate of ``app``."""
    _declared.extend(definitions)
    _retired.extend(retired)
    post_migrate.connect(
        partial(_on_post_migrate, definitions, tuple(retired)),
        sender=app,
        weak=False,
        dispatch_uid=f"{app.label}.schedules",
    )


def ensure_schedules(
    definitions: Iterable[Definition] | None = None,
    using: str = DEFAULT_DB_ALIAS,
    retired: Iterable[str] | None = None,
) -> None:
    """Create or correct these schedules and delete the retired ones (by default every
    declared one)."""
    from django_q.models import Schedule

    with transaction.atomic(using=using):
        for definition in _declared if definitions is None else definitions:
            _ensure(definition, using)
        names = list(_retired if retired is None else retired)
        if names:
            Schedule.objects.using(using).filter(name__in=names).delete()


def _ensure(definition: Definition, using: str) -> None:
    from django_q.models import Schedule

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


def _on_post_migrate(
    definitions: tuple[Definition, ...],
    retired: tuple[str, ...],
    using: str = DEFAULT_DB_ALIAS,
    **kwargs: Any,
) -> None:
    """Does nothing until django_q's tables exist on that database."""
    from django_q.models import Schedule

    if not router.allow_migrate_model(using, Schedule):
        return
    if Schedule._meta.db_table not in connections[using].introspection.table_names():
        return
    ensure_schedules(definitions, using, retired)
