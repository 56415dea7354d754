"""Filters of a query string: each reader notes a bad value in the caller's ``errors`` (for
one `400 invalid_request` naming every bad filter) and reads it as None."""

from collections.abc import Collection, Mapping

from django.http import QueryDict

UNPRINTABLE_RULE = "Must be printable text."
REPEATED_RULE = "Given more than once: give it once."


def repeated_params(params: QueryDict) -> dict[str, list[str]]:
    """Every parameter given more than once (`?limit=1&limit=2`), for one `400 invalid_request`
    on every route: no parameter of the API is a list, and which of two values a route would
    use is not something a client should have to guess."""
    return {name: [REPEATED_RULE] for name, values in params.lists() if len(values) > 1}


def text_param(params: Mapping[str, str], name: str, errors: dict[str, list[str]]) -> str | None:
    """The value of ``name``, None when absent or empty. One holding a character no stored
    value has (PostgreSQL text cannot even hold NUL) is noted in ``errors`` under its name,
    for the caller's `400 invalid_request`, and read as None."""
    value = params.get(name) or None
    if value is not None and not value.isprintable():
        errors[name] = [UNPRINTABLE_RULE]
        return None
    return value


def choice_param(
    params: Mapping[str, str], name: str, allowed: Collection[str], errors: dict[str, list[str]]
) -> str | None:
    """The value of ``name``, None when absent or empty; one not in ``allowed`` is noted."""
    value = params.get(name) or None
    if value is not None and value not in allowed:
        errors[name] = ["Must be one of: " + ", ".join(allowed) + "."]
        return None
    return value
