"""Free-text values of a query string that the database compares against stored text."""

from collections.abc import Mapping

from gshost.api.errors import invalid_request

UNPRINTABLE_RULE = "Must be printable text."


def text_param(params: Mapping[str, str], name: str) -> str | None:
    """The value of ``name``, None when absent or empty. One holding a character no stored
    value has (PostgreSQL text cannot even hold NUL) is `400 invalid_request` naming it."""
    value = params.get(name) or None
    if value is not None and not value.isprintable():
        raise invalid_request("The filters are not valid.", {name: [UNPRINTABLE_RULE]})
    return value
