"""Panel forms for webhooks. They parse what people type; the services still judge the URL and
the events, and their refusals land on these forms (`add_refusal`)."""

from typing import Any

from django import forms

from webhooks.errors import (
    InvalidWebhookRequest,
    UnknownEvents,
    UnsafeWebhookUrl,
    WebhookLimitReached,
    WebhookRequestRefused,
)
from webhooks.events import Event
from webhooks.models import DeliveryStatus
from webhooks.services import (
    DEFAULT_GRACE_HOURS,
    MAX_DESCRIPTION_LENGTH,
    MAX_GRACE_HOURS,
    MAX_URL_LENGTH,
)

EVENT_CHOICES = [(event.value, event.value) for event in Event]


class WebhookForm(forms.Form):
    url = forms.CharField(
        label="URL",
        max_length=MAX_URL_LENGTH,
        help_text="A public https address. Private, loopback and numeric hosts are refused.",
        widget=forms.URLInput(attrs={"placeholder": "https://hooks.example.com/gshost"}),
        error_messages={"required": "A webhook needs a URL."},
    )
    events = forms.MultipleChoiceField(
        choices=EVENT_CHOICES,
        widget=forms.CheckboxSelectMultiple,
        help_text="Deliveries are sent for these events of every server of the organization.",
        error_messages={"required": "Pick at least one event."},
    )
    description = forms.CharField(
        required=False,
        max_length=MAX_DESCRIPTION_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
    )

    def webhook_fields(self) -> dict[str, Any]:
        """Keyword arguments for `webhook_create` / `webhook_update`, from a valid form."""
        data = self.cleaned_data
        return {"url": data["url"], "events": data["events"], "description": data["description"]}

    def add_refusal(self, refused: WebhookRequestRefused) -> str:
        """Put the service's refusal on the form; returns the contract's error code."""
        if isinstance(refused, UnsafeWebhookUrl):
            self.add_error("url", f"{refused.reason}: {refused}")
            return "invalid_webhook_url"
        if isinstance(refused, UnknownEvents):
            self.add_error("events", str(refused))
            return "unknown_event"
        if isinstance(refused, WebhookLimitReached):
            self.add_error(None, str(refused))
            return "limit_reached"
        if isinstance(refused, InvalidWebhookRequest):
            for name, messages in refused.fields.items():
                self.add_error(name if name in self.fields else None, messages)
            return "invalid_request"
        self.add_error(None, str(refused))
        return "invalid_request"


class DeliveryFilterForm(forms.Form):
    status = forms.ChoiceField(
        required=False, choices=[("", "All statuses"), *DeliveryStatus.choices]
    )
    event = forms.ChoiceField(required=False, choices=[("", "All events"), *EVENT_CHOICES])

    def filters(self) -> dict[str, Any]:
        status, event = self.cleaned_data["status"], self.cleaned_data["event"]
        return {
            "status": DeliveryStatus(status) if status else None,
            "event": Event(event) if event else None,
        }


class SecretRollForm(forms.Form):
    grace_hours = forms.IntegerField(
        label="Grace period (hours)",
        min_value=0,
        max_value=MAX_GRACE_HOURS,
        initial=DEFAULT_GRACE_HOURS,
        help_text=f"0 to {MAX_GRACE_HOURS}. 0 stops the current secret at once.",
    )
