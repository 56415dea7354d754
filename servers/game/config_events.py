"""Config events: settings changed at a set time and, optionally, changed back later (a
weekend PvP event, a holiday message of the day). A minute task applies and reverts them;
GET /servers/{id}/config-events/status shows where each stands."""

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts.models import User
from audit.actors import Actor
from audit.services import PanelAction
from servers.errors import InvalidConfigEvent
from servers.game.settings import clean_values, desired_settings, settings_update
from servers.models import ConfigEvent, ConfigEventState, Server, SettingSource

STATUS_WINDOW = timedelta(hours=24)  # settled events stay on the status route this long


def config_event_create(
    *,
    server: Server,
    name: str,
    changes: dict[str, Any],
    apply_at: datetime,
    revert_at: datetime | None,
    created_by: User | None,
    actor: Actor,
) -> ConfigEvent:
    name = name.strip()
    if not name or len(name) > 100:
        raise InvalidConfigEvent("A config event needs a name of at most 100 characters.")
    if not changes:
        raise InvalidConfigEvent("A config event changes at least one setting.")
    if revert_at is not None and revert_at <= apply_at:
        raise InvalidConfigEvent("The revert time must come after the apply time.")
    with transaction.atomic():
        event = ConfigEvent.objects.create(
            server=server,
            name=name,
            changes=clean_values(server.game, changes),
            apply_at=apply_at,
            revert_at=revert_at,
            created_by=created_by,
        )
        _audit(actor, server)
    return event


def config_event_cancel(*, event: ConfigEvent, actor: Actor) -> bool:
    """Call off an event that has not been applied yet."""
    with transaction.atomic():
        changed = ConfigEvent.objects.filter(id=event.id, state=ConfigEventState.SCHEDULED).update(
            state=ConfigEventState.CANCELLED, settled_at=timezone.now()
        )
        if changed:
            _audit(actor, event.server)
    return changed == 1


def config_event_revert_now(*, event: ConfigEvent, actor: Actor) -> bool:
    """End an applied event early."""
    with transaction.atomic():
        reverted = _revert(event)
        if reverted:
            _audit(actor, event.server)
    return reverted


def config_events_apply_due(now: datetime | None = None) -> int:
    """Apply what is due, then revert what is due (both, after downtime). How many moved."""
    now = now or timezone.now()
    moved = 0
    due = ConfigEvent.objects.filter(state=ConfigEventState.SCHEDULED, apply_at__lte=now)
    for event in due.select_related("server").order_by("apply_at"):
        moved += _apply(event)
    ending = ConfigEvent.objects.filter(state=ConfigEventState.APPLIED, revert_at__lte=now)
    for event in ending.select_related("server").order_by("revert_at"):
        moved += _revert(event)
    return moved


def _apply(event: ConfigEvent) -> bool:
    with transaction.atomic():
        previous = {key: desired_settings(event.server)[key] for key in event.changes}
        now = timezone.now()
        changed = ConfigEvent.objects.filter(id=event.id, state=ConfigEventState.SCHEDULED).update(
            state=ConfigEventState.APPLIED,
            previous_values=previous,
            applied_at=now,
            settled_at=None if event.revert_at else now,
        )
        if changed != 1:
            return False
        actor = Actor.system(f"config event {event.id}")
        settings_update(
            server=event.server,
            values=event.changes,
            actor=actor,
            source=SettingSource.CONFIG_EVENT,
            config_event=event,
        )
    return True


def _revert(event: ConfigEvent) -> bool:
    """Put back the values from before the event, except where someone changed a setting
    since (their change wins)."""
    with transaction.atomic():
        changed = ConfigEvent.objects.filter(id=event.id, state=ConfigEventState.APPLIED).update(
            state=ConfigEventState.REVERTED, settled_at=timezone.now()
        )
        if changed != 1:
            return False
        event.refresh_from_db()
        desired = desired_settings(event.server)
        untouched = {
            key: value
            for key, value in event.previous_values.items()
            if desired.get(key) == event.changes.get(key)
        }
        if untouched:
            settings_update(
                server=event.server,
                values=untouched,
                actor=Actor.system(f"config event {event.id}"),
                source=SettingSource.CONFIG_EVENT,
                config_event=event,
            )
    return True


def _audit(actor: Actor, server: Server) -> None:
    actor.audit(
        organization_id=server.organization_id,
        action=PanelAction.SERVER_UPDATE,
        server_id=server.id,
    )


def config_events_for_status(server: Server, now: datetime) -> QuerySet[ConfigEvent]:
    """Events still to apply or revert, and those settled in the last 24 hours."""
    recent = Q(settled_at__isnull=True) | Q(settled_at__gte=now - STATUS_WINDOW)
    return ConfigEvent.objects.filter(recent, server=server).order_by("apply_at", "id")
