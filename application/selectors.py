"""Reads for the Application API. Its keys are the host's own: every customer and server of
the installation is in reach; external ids are looked up among the calling integration's."""

import math
from typing import Any

from django.db.models import QuerySet

from accounts.models import Organization
from application.errors import CustomerNotFound, PlanNotFound
from application.models import Plan
from servers.errors import ServerNotFound
from servers.fleet.placement import NodeLoad
from servers.game.registry import games_of
from servers.models import Server
from servers.selectors import servers_live


def customer_list(
    *, integration_pk: int, external_id: str | None = None, email: str | None = None
) -> QuerySet[Organization]:
    """Exact matches only: an external id as given, an owner's email case-insensitively
    (`a@x.io` never finds `aa@x.io`)."""
    customers = Organization.objects.select_related("customer").prefetch_related(
        "memberships__user"
    )
    if external_id is not None:
        customers = customers.filter(
            customer__integration_id=integration_pk, customer__external_id=external_id
        )
    if email is not None:
        customers = customers.filter(
            memberships__role="owner", memberships__user__email__iexact=email
        )
    return customers


def customer_get(organization_id: str) -> Organization:
    found = customer_list(integration_pk=0).filter(id=organization_id).first()
    if found is None:
        raise CustomerNotFound()
    return found


def plan_list() -> QuerySet[Plan]:
    return Plan.objects.all()


def plan_get(plan_id: str) -> Plan:
    found = Plan.objects.filter(id=plan_id).first()
    if found is None:
        raise PlanNotFound()
    return found


def server_list(*, integration_pk: int, external_id: str | None = None) -> QuerySet[Server]:
    servers = servers_live().select_related("node", "sold")
    if external_id is not None:
        servers = servers.filter(sold__integration_id=integration_pk, sold__external_id=external_id)
    return servers


def server_get(server_id: str) -> Server:
    found = servers_live().select_related("node", "sold").filter(id=server_id).first()
    if found is None:
        raise ServerNotFound()
    return found


def _known(value: float | int | None) -> int | None:
    return None if value is None or value == math.inf else int(value)


def node_json(load: NodeLoad) -> dict[str, Any]:
    node = load.node
    memory_limit, disk_limit = load.limit(node.memory_mb), load.limit(node.disk_mb)
    ports = node.port_count if load.forwards_ports else None
    return {
        "name": node.name,
        "tags": list(node.tags or []),
        "state": node.state(),
        "drained": node.drained,
        "games": list(games_of(node)),
        "servers": load.servers,
        "capacity": {"memory_mb": memory_limit, "disk_mb": disk_limit, "ports": ports},
        "committed": {
            "memory_mb": load.memory_committed,
            "disk_mb": load.disk_committed,
            "ports": load.used_ports if load.forwards_ports else None,
        },
        "free": {
            "memory_mb": _known(load.free_memory),
            "disk_mb": _known(load.free_disk),
            "ports": load.free_ports,
        },
    }
