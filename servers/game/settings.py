"""Game settings: the catalogue per game, and what a server wants versus what it runs with."""

from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.actors import Actor
from audit.services import PanelAction
from gshost import process_state
from servers.errors import InvalidSetting
from servers.game.registry import template
from servers.models import ConfigEvent, Server, SettingChange, SettingSource
from servers.runtime import get_runtime
from servers.suspension import refuse_if_suspended


class Kind(StrEnum):
    INTEGER = "integer"
    CHOICE = "choice"
    BOOLEAN = "boolean"
    TEXT = "text"


@dataclass(frozen=True)
class SettingSpec:
    key: str
    label: str
    kind: Kind
    default: str
    choices: tuple[str, ...] = ()
    minimum: int = 0
    maximum: int = 0

    def clean(self, value: str) -> str:
        """The value in its stored form, or InvalidSetting saying what is wrong with it."""
        value = value.strip()
        if not value.isprintable():  # a newline, CR, U+2028/U+2029 or a control character
            raise InvalidSetting(f"{self.key} must be one line of printable characters.")
        if self.kind == Kind.INTEGER:
            digits = value.removeprefix("-")
            if not (digits.isascii() and digits.isdigit() and len(digits) <= 12) or not (
                self.minimum <= int(value) <= self.maximum
            ):
                raise InvalidSetting(
                    f"{self.key} must be a whole number from {self.minimum} to {self.maximum}."
                )
            return str(int(value))
        if self.kind == Kind.BOOLEAN:
            if value.lower() not in ("true", "false"):
                raise InvalidSetting(f"{self.key} must be true or false.")
            return value.lower()
        if self.kind == Kind.CHOICE and value not in self.choices:
            raise InvalidSetting(f"{self.key} must be one of {', '.join(self.choices)}.")
        if self.kind == Kind.TEXT and len(value) > self.maximum:
            raise InvalidSetting(f"{self.key} must be at most {self.maximum} characters.")
        return value


@cache
def specs_for(game: str) -> tuple[SettingSpec, ...]:
    """The game's settings, as its shipped template lists them (gshost_agent/games/, or
    servers/simulated/games/); none for an operator's own template, which the control plane
    does not have."""
    known = template(game)
    if known is None:
        return ()
    return tuple(
        SettingSpec(
            key=field.key,
            label=field.label,
            kind=Kind(field.kind),
            default=field.default,
            choices=field.choices,
            minimum=field.minimum,
            maximum=field.maximum,
        )
        for field in known.settings_fields
    )


def max_players_key(game: str) -> str:
    """The setting that holds the maximum number of players."""
    known = template(game)
    players = known.players if known is not None else None
    return players.max_setting if players and players.max_setting else "max_players"


def defaults_for(game: str) -> dict[str, str]:
    return {spec.key: spec.default for spec in specs_for(game)}


def effective(game: str, values: dict[str, str]) -> dict[str, str]:
    """Every setting of the game: the given values over the defaults (unknown keys dropped)."""
    merged = defaults_for(game)
    merged.update({key: str(values[key]) for key in merged if key in values})
    return merged


def desired_settings(server: Server) -> dict[str, str]:
    return effective(server.game, server.desired_settings)


def settings_report_applied(*, server: Server) -> None:
    """The host now runs with the desired settings (a game reads them when it starts)."""
    Server.objects.filter(id=server.id).update(reported_settings=desired_settings(server))


def clean_values(game: str, values: dict[str, Any]) -> dict[str, str]:
    """Values in their stored form, or InvalidSetting naming the first bad one."""
    specs = {spec.key: spec for spec in specs_for(game)}
    unknown = sorted(set(values) - set(specs))
    if unknown:
        raise InvalidSetting(f"Unknown setting for this game: {', '.join(unknown)}.")
    return {key: specs[key].clean(str(value)) for key, value in values.items()}


def settings_update(
    *,
    server: Server,
    values: dict[str, Any],
    actor: Actor,
    source: SettingSource = SettingSource.PANEL,
    config_event: ConfigEvent | None = None,
) -> list[SettingChange]:
    """Change desired settings; one history row per setting that really changed. No event
    fires (a setting is no state change). The runtime is told; a running game takes them at
    its restart."""
    with transaction.atomic():
        current = Server.objects.select_for_update().get(id=server.id)
        if source == SettingSource.PANEL:  # the customer's own change; the system's go on
            refuse_if_suspended(current)
        cleaned = clean_values(current.game, values)
        desired = desired_settings(current)
        changed = {key: value for key, value in cleaned.items() if desired[key] != value}
        if not changed:
            return []
        current.desired_settings = {**current.desired_settings, **changed}
        Server.objects.filter(id=current.id).update(desired_settings=current.desired_settings)
        rows = _history_rows(current, desired, changed, actor, source, config_event)
        SettingChange.objects.bulk_create(rows)
        actor.audit(
            organization_id=current.organization_id,
            action=PanelAction.SERVER_UPDATE,
            server_id=current.id,
        )
        # After the commit (of the outermost transaction): no call to a node inside one.
        transaction.on_commit(lambda: get_runtime(current).push_settings(current))
    server.desired_settings = current.desired_settings
    return rows


def _history_rows(
    server: Server,
    before: dict[str, str],
    changed: dict[str, str],
    actor: Actor,
    source: SettingSource,
    config_event: ConfigEvent | None,
) -> list[SettingChange]:
    now = timezone.now()
    return [
        SettingChange(
            server=server,
            key=key,
            previous_value=before[key],
            new_value=value,
            source=source,
            changed_by=actor.user_email or "",
            config_event=config_event,
            changed_at=now,
        )
        for key, value in changed.items()
    ]


process_state.register(
    "servers.game.settings",
    bound="the settings of each template game (gshost_agent/games/): a handful",
    reset=specs_for.cache_clear,
)
