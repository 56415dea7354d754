"""Panel forms for servers. They parse what people type; the services still decide."""

from typing import Any

from django import forms

from servers.game.settings import Kind, SettingSpec, specs_for
from servers.models import ALERTABLE_STATUSES, JobKind
from servers.schedules import MAX_ALERT_AFTER_MISSED, ScheduleInput
from servers.services import MAX_COMMAND_LENGTH, PowerAction

UTC_INPUT_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S"]


class PowerForm(forms.Form):
    action = forms.ChoiceField(choices=[(a.value, a.value) for a in PowerAction])


class ConsoleForm(forms.Form):
    command = forms.CharField(max_length=MAX_COMMAND_LENGTH, label="Command")


class MaintenanceForm(forms.Form):
    action = forms.ChoiceField(
        choices=[(k.value, k.label) for k in (JobKind.WIPE, JobKind.REINSTALL)]
    )


class BackupForm(forms.Form):
    name = forms.CharField(max_length=100, required=False, label="Name (optional)")


class ScheduleForm(forms.Form):
    name = forms.CharField(max_length=100)
    cron = forms.CharField(
        max_length=100,
        label="Cron (UTC)",
        help_text="Five fields: minute hour day-of-month month day-of-week, e.g. */15 * * * *",
    )
    command = forms.CharField(max_length=MAX_COMMAND_LENGTH)
    enabled = forms.BooleanField(required=False, initial=True)
    alert_on = forms.MultipleChoiceField(
        choices=[(s, s) for s in ALERTABLE_STATUSES],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        label="Alert when a run is",
        help_text="Fires command_schedule.alert and emails you.",
    )
    alert_after_missed = forms.IntegerField(
        min_value=1,
        max_value=MAX_ALERT_AFTER_MISSED,
        initial=3,
        label="Alert after this many missed runs in a row",
    )

    def schedule_input(self) -> ScheduleInput:
        data = self.cleaned_data
        return ScheduleInput(
            name=data["name"],
            cron=data["cron"],
            command=data["command"],
            enabled=data["enabled"],
            alert_on=tuple(data["alert_on"]),
            alert_after_missed=data["alert_after_missed"],
        )


def _setting_field(spec: SettingSpec, required: bool) -> forms.Field:
    common: dict[str, Any] = {"label": spec.label, "required": required}
    if spec.kind == Kind.CHOICE:
        choices = ([("", "—")] if not required else []) + [(c, c) for c in spec.choices]
        return forms.ChoiceField(choices=choices, **common)
    if spec.kind == Kind.BOOLEAN:
        choices = ([("", "—")] if not required else []) + [("true", "on"), ("false", "off")]
        return forms.ChoiceField(choices=choices, **common)
    if spec.kind == Kind.INTEGER:
        return forms.IntegerField(min_value=spec.minimum, max_value=spec.maximum, **common)
    return forms.CharField(max_length=spec.maximum, strip=True, **common)


class SettingsForm(forms.Form):
    """One field per setting of the server's game."""

    def __init__(self, *args: Any, game: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for spec in specs_for(game):
            self.fields[spec.key] = _setting_field(spec, required=spec.kind != Kind.TEXT)

    def values(self) -> dict[str, str]:
        return {key: str(value) for key, value in self.cleaned_data.items() if value is not None}


class ConfigEventForm(forms.Form):
    """When, and which settings change (only the filled-in ones)."""

    name = forms.CharField(max_length=100)
    apply_at = forms.DateTimeField(
        input_formats=UTC_INPUT_FORMATS,
        label="Apply at (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    revert_at = forms.DateTimeField(
        input_formats=UTC_INPUT_FORMATS,
        required=False,
        label="Revert at (UTC, optional)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )

    def __init__(self, *args: Any, game: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setting_keys = [spec.key for spec in specs_for(game)]
        for spec in specs_for(game):
            self.fields[spec.key] = _setting_field(spec, required=False)

    def changes(self) -> dict[str, str]:
        data = self.cleaned_data
        return {key: str(data[key]) for key in self.setting_keys if data.get(key) not in (None, "")}

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.errors and not self.changes():
            raise forms.ValidationError("Choose at least one setting for the event to change.")
        return data
