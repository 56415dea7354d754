"""Every URL pattern of the panel (and its sign-in pages), found by walking the URL conf."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver

PANEL_PREFIXES = ("panel/", "accounts/")


@dataclass(frozen=True)
class PanelPattern:
    route: str
    callback: Callable[..., Any]
    name: str


def _walk(patterns: list[Any], prefix: str = "") -> Iterator[PanelPattern]:
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, route)
        elif isinstance(entry, URLPattern):
            yield PanelPattern(route.replace("^", ""), entry.callback, entry.name or "")


def panel_patterns() -> list[PanelPattern]:
    return [p for p in _walk(get_resolver().url_patterns) if p.route.startswith(PANEL_PREFIXES)]
