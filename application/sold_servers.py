"""Servers sold through an integration: created by §15.1's placement (the service
`createserver` uses), under an external id the database keeps unique per integration."""

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Organization
from application.errors import ExternalIdConflict, NoCapacity
from application.models import Plan, SoldServer
from application.plans import limits_of
from audit.actors import Actor
from servers.errors import InvalidState, NodeUnavailable, NoNodeFits, UnknownGame
from servers.fleet.placement import Plan as Limits
from servers.game.settings import settings_update
from servers.models import Server
from servers.selectors import server_last_start_at
from servers.services import PowerAction, server_change, server_create, server_power

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerOrder:
    external_id: str | None
    customer: Organization
    name: str
    game: str | None
    plan: Plan | None
    limits: Limits
    tags: list[str] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)
    start: bool = False
    request_hash: str = ""


def _known(integration_pk: int, external_id: str | None) -> SoldServer | None:
    if external_id is None:
        return None
    return (
        SoldServer.objects.select_related("server")
        .filter(integration_id=integration_pk, external_id=external_id)
        .first()
    )


def _same_or_conflict(sold: SoldServer, order: ServerOrder) -> tuple[Server, bool]:
    if sold.request_hash != order.request_hash:
        raise ExternalIdConflict("server", sold.server_id)
    return sold.server, False


def sold_server_create(
    *, integration_pk: int, order: ServerOrder, actor: Actor
) -> tuple[Server, bool]:
    """The new server (and True), or the one this integration already has under that
    external id from the same body (and False). ExternalIdConflict for another body;
    NoCapacity, naming what is short, when no node takes it (nothing is left behind)."""
    known = _known(integration_pk, order.external_id)
    if known is not None:
        return _same_or_conflict(known, order)
    tags = list(dict.fromkeys([*(order.plan.tags if order.plan else []), *order.tags]))
    try:
        with transaction.atomic():
            server = server_create(
                organization=order.customer,
                name=order.name,
                game=order.game,
                plan=order.limits,
                tags=tags,
                backups_limit=order.plan.backups_limit if order.plan else None,
                actor=actor,
            )
            # The unique (integration, external_id) constraint: of two requests with one
            # external id, the second waits for the first's commit here, then fails.
            SoldServer.objects.create(
                server=server,
                integration_id=integration_pk,
                external_id=order.external_id,
                plan=order.plan,
                request_hash=order.request_hash,
            )
            if order.settings:
                settings_update(server=server, values=order.settings, actor=actor)
    except (NoNodeFits, UnknownGame) as refused:
        raise NoCapacity(refused.message) from None
    except IntegrityError:
        known = _known(integration_pk, order.external_id)
        if known is None:
            raise
        return _same_or_conflict(known, order)
    if order.start:
        server = _started(server, actor)
    return server, True


def _started(server: Server, actor: Actor) -> Server:
    """The new server started, as `"start": true` asks. A start its node does not take leaves
    the server made all the same (its record says how the start went): the create succeeded,
    and a retry of it would not start it."""
    try:
        return server_power(server=server, action=PowerAction.START, actor=actor)
    except (NodeUnavailable, InvalidState) as refused:
        logger.info("Server %s made; its first start was not taken: %s", server.id, refused)
        return Server.objects.get(id=server.id)


@dataclass(frozen=True)
class ServerChanges:
    name: str | None = None
    plan: Plan | None = None
    limits: Limits | None = None
    external_id: str | None = None
    external_id_given: bool = False


def sold_server_change(
    *, integration_pk: int, server: Server, changes: ServerChanges, actor: Actor
) -> Server:
    """Only what is given changes. New limits apply at the next start; NoCapacity when the
    server's node has no room for them."""
    limits = limits_of(changes.plan) if changes.plan is not None else changes.limits
    try:
        with transaction.atomic():
            sold, _ = SoldServer.objects.select_for_update().get_or_create(
                server=server, defaults={"integration_id": integration_pk}
            )
            updated = server_change(server=server, name=changes.name, plan=limits, actor=actor)
            fields = []
            if changes.plan is not None:
                sold.plan = changes.plan
                fields.append("plan")
                updated = _keep_backups(updated, changes.plan)
            if limits is not None and limits != Limits.of(server):
                sold.limits_changed_at = timezone.now()
                fields.append("limits_changed_at")
            if changes.external_id_given:
                sold.external_id = changes.external_id
                fields.append("external_id")
            if fields:
                sold.save(update_fields=fields)
    except NoNodeFits as refused:
        raise NoCapacity(refused.message) from None
    except IntegrityError:
        raise ExternalIdConflict("server", server.id) from None
    return updated


def _keep_backups(server: Server, plan: Plan) -> Server:
    """The plan's backups limit given to the server: backups it makes from now on beyond it
    delete the oldest (servers.backups.jobs)."""
    Server.objects.filter(id=server.id).update(backups_limit=plan.backups_limit)
    server.backups_limit = plan.backups_limit
    return server


def pending_restart(server: Server, limits_changed_at: datetime | None) -> bool:
    """The server's limits changed since its game last started: they apply at its next start,
    and until then this is true, whether the game runs now or not."""
    if limits_changed_at is None:
        return False
    started = server_last_start_at(server)
    return started is None or started < limits_changed_at
