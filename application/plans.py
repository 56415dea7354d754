"""Plans a billing system sells: limits (checked against what a node can hold) and tags."""

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from application.errors import PlanInUse
from application.models import Plan, SoldServer
from servers.fleet.placement import Plan as Limits


@dataclass(frozen=True)
class PlanInput:
    name: str
    limits: Limits
    backups_limit: int
    tags: list[str]


def limits_of(plan: Plan) -> Limits:
    return Limits(plan.memory_mb, plan.disk_mb, plan.cpu_percent, plan.processes)


def plan_create(*, data: PlanInput) -> Plan:
    return Plan.objects.create(
        name=data.name, backups_limit=data.backups_limit, tags=data.tags, **data.limits.fields()
    )


def plan_update(*, plan: Plan, changes: dict[str, Any]) -> Plan:
    """Only the fields given change. Servers already sold keep their limits until the plan is
    given to them again (PATCH /servers/{id} with "plan")."""
    limits = {name: changes.get(name, getattr(plan, name)) for name in Limits().fields()}
    Limits(**limits)  # refuses a value out of bounds, naming it
    for name, value in changes.items():
        setattr(plan, name, value)
    plan.save(update_fields=list(changes) or None)
    return plan


def plan_delete(*, plan: Plan) -> None:
    try:
        with transaction.atomic():
            if SoldServer.objects.filter(plan=plan).exists():
                raise PlanInUse()
            plan.delete()
    except (ProtectedError, IntegrityError):  # given to a server meanwhile
        raise PlanInUse() from None
