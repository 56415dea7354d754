"""Readings as the panel shows them: what a node could not measure is "—", never "None"."""

import signal

from django import template

register = template.Library()

NOT_MEASURED = "—"


@register.filter
def measured(value: object, unit: str = "") -> str:
    """``12.5|measured:"kbps"`` is "12.5 kbps", a percentage sticks to its number ("40%"), and
    a reading the node does not take (None) is "—"."""
    if value is None or value == "":
        return NOT_MEASURED
    if not unit:
        return str(value)
    return f"{value}{unit}" if unit == "%" else f"{value} {unit}"


@register.filter
def signal_name(number: int | None) -> str:
    """9 is "SIGKILL (9)"; a number this system does not name stays a number."""
    if number is None:
        return ""
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return f"signal {number}"
