"""Free-text values of a query string that the database compares against stored text."""

from collections.abc import Mapping

UNPRINTABLE_RULE = "Must be printable text."


def text_param(params: Mapping[str, str], name: str, errors: dict[str, list[str]]) -> str | None:
    """The value of ``name``, None when absent or empty. One holding a character no stored
    value has (PostgreSQL text cannot even hold NUL) is noted in ``errors`` under its name,
    for the caller's `400 invalid_request`, and read as None."""
    value = params.get(name) or None
    if value is not None and not value.isprintable():
        errors[name] = [UNPRINTABLE_RULE]
        return None
    return value
