"""Panel forms. They parse what people type and point at every mistake at once; the services
still decide what is allowed (a refusal there lands on the form too)."""

import ipaddress
import re
from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm

from accounts.scopes import Scope
from accounts.services import (
    DEFAULT_EXPIRY_DAYS,
    DEFAULT_GRACE_HOURS,
    MAX_EXPIRY_DAYS,
    MAX_GRACE_HOURS,
)

_SEPARATORS = re.compile(r"[\s,]+")
NEVER = "never"
MAX_SCOPE_LENGTH = 100


def split_list(text: str) -> list[str]:
    """Entries separated by spaces, commas or newlines; blanks dropped."""
    return [entry for entry in _SEPARATORS.split(text) if entry]


def _is_network(entry: str) -> bool:
    try:
        ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False
    return True


class EmailAuthenticationForm(AuthenticationForm):
    """Sign-in by email address (the field keeps Django's name, `username`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["username"].label = "Email"
        self.fields["username"].widget.attrs.update(
            {"type": "email", "autocomplete": "email", "autocapitalize": "none"}
        )

    def clean_username(self) -> str:
        return str(self.cleaned_data.get("username", "")).strip().lower()


class AnyScopeField(forms.MultipleChoiceField):
    """Checkboxes of the scopes one holds, yet any scope string posted reaches the service:
    there, a scope beyond the creator's is refused and an unknown one is written, granting
    nothing."""

    def valid_value(self, value: str) -> bool:
        return bool(value.strip()) and len(value) <= MAX_SCOPE_LENGTH


class KeyCreateForm(forms.Form):
    name = forms.CharField(
        max_length=100, error_messages={"required": "A key needs a name."}, strip=True
    )
    description = forms.CharField(
        required=False, max_length=1000, widget=forms.Textarea(attrs={"rows": 2})
    )
    expiry_days = forms.CharField(
        required=False,
        max_length=10,
        label="Expiry (days)",
        help_text=f"1 to 365 days; empty means {DEFAULT_EXPIRY_DAYS}; “never” for no expiry.",
        widget=forms.TextInput(attrs={"list": "expiry-options", "placeholder": "90"}),
    )
    scopes = AnyScopeField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="You can grant only the scopes you hold yourself.",
    )
    extra_scopes = forms.CharField(
        required=False,
        max_length=2000,
        label="Other scopes",
        help_text="Space or comma separated. Unrecognized scopes are kept but grant nothing.",
    )
    servers = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Restrict to servers",
        help_text="None ticked: the key may use every server of the organization.",
    )
    allowed_ips = forms.CharField(
        required=False,
        max_length=4000,
        label="Allowed IP addresses",
        help_text="IP addresses or CIDR ranges, separated by spaces, commas or new lines. "
        "Empty: any address.",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "203.0.113.0/24"}),
    )

    def __init__(
        self,
        *args: Any,
        held_scopes: frozenset[str],
        servers: list[tuple[str, str]],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        scopes_field = self.fields["scopes"]
        assert isinstance(scopes_field, AnyScopeField)
        scopes_field.choices = [(s.value, s.value) for s in Scope if s.value in held_scopes]
        servers_field = self.fields["servers"]
        assert isinstance(servers_field, forms.MultipleChoiceField)
        servers_field.choices = servers

    def clean_expiry_days(self) -> int | None:
        raw = str(self.cleaned_data.get("expiry_days", "")).strip()
        if not raw:
            return DEFAULT_EXPIRY_DAYS
        if raw.lower() == NEVER:
            return None
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_EXPIRY_DAYS:
            raise forms.ValidationError(
                f"Enter a number of days from 1 to {MAX_EXPIRY_DAYS}, or “never”."
            )
        return int(raw)

    def clean_extra_scopes(self) -> list[str]:
        entries = split_list(str(self.cleaned_data.get("extra_scopes", "")))
        too_long = [entry for entry in entries if len(entry) > MAX_SCOPE_LENGTH]
        if too_long:
            raise forms.ValidationError(f"Scopes are at most {MAX_SCOPE_LENGTH} characters.")
        return entries

    def clean_allowed_ips(self) -> list[str]:
        entries = split_list(str(self.cleaned_data.get("allowed_ips", "")))
        bad = [entry for entry in entries if not _is_network(entry)]
        if bad:
            raise forms.ValidationError("Not an IP address or CIDR range: " + ", ".join(bad[:5]))
        return entries

    def key_request(self) -> dict[str, Any]:
        """Keyword arguments for `api_key_create`, from a valid form."""
        data = self.cleaned_data
        return {
            "name": data["name"],
            "description": data["description"],
            "expiry_days": data["expiry_days"],
            "scopes": [*data["scopes"], *data["extra_scopes"]],
            "server_ids": data["servers"],
            "allowed_ips": data["allowed_ips"],
        }


class KeyRotateForm(forms.Form):
    grace_hours = forms.IntegerField(
        required=False,
        initial=DEFAULT_GRACE_HOURS,
        label="Grace period (hours)",
        help_text=f"0 to {MAX_GRACE_HOURS} hours; 0 stops the old key at once.",
        widget=forms.NumberInput(attrs={"min": 0, "max": MAX_GRACE_HOURS}),
    )

    def clean_grace_hours(self) -> int:
        hours = self.cleaned_data.get("grace_hours")
        return DEFAULT_GRACE_HOURS if hours is None else int(hours)


class CodeForm(forms.Form):
    """A code from the authenticator app (6 digits) or a recovery code."""

    code = forms.CharField(
        label="Code",
        max_length=40,
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "autofocus": True}),
    )


class SecondFactorRuleForm(forms.Form):
    require_second_factor = forms.BooleanField(
        label="Every member must use a second factor", required=False
    )


class SshKeyForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="To tell your keys apart, e.g. laptop.")
    public_key = forms.CharField(
        max_length=16_384,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text="One line, as in ~/.ssh/id_ed25519.pub: ssh-ed25519, ecdsa-sha2-* or "
        "ssh-rsa of at least 2,048 bits.",
    )
