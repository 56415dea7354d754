"""The panel's readings: a value with its unit, and "—" for what a node cannot measure."""

import pytest
from django.template import Context, Template


def render(source: str, **values: object) -> str:
    return Template("{% load measures %}" + source).render(Context(values))


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [(12.5, "kbps", "12.5 kbps"), (40, "%", "40%"), (0, "MB", "0 MB"), (None, "kbps", "—")],
)
def test_a_reading_is_shown_with_its_unit_or_as_a_dash_when_not_measured(value, unit, shown):
    assert render("{{ value|measured:unit }}", value=value, unit=unit) == shown


@pytest.mark.parametrize(
    ("number", "shown"), [(9, "SIGKILL (9)"), (15, "SIGTERM (15)"), (99, "signal 99")]
)
def test_a_signal_is_named(number, shown):
    assert render("{{ number|signal_name }}", number=number) == shown
