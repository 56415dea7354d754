"""Reading a message's fields: each check names the field at fault in its `ProtocolError`."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from gshost_agent.protocol.names import ProtocolError, parse_moment

MAX_INT = 2**63


def obj(value: Any, field: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(field, f"{field} must be {what}.")
    return value


def text(
    body: dict[str, Any],
    field: str,
    *,
    pattern: re.Pattern[str] | None = None,
    longest: int | None = None,
    optional: bool = False,
) -> str | None:
    """A string (of `pattern`'s form, or printable and at most `longest` characters)."""
    value = body.get(field)
    if value is None and optional:
        return None
    if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
        form = " of the expected form" if pattern is not None else ""
        raise ProtocolError(field, f"{field} must be a string{form}.")
    if longest is not None and (len(value) > longest or not value.isprintable()):
        raise ProtocolError(field, f"{field} must be a string of at most {longest} characters.")
    return value


def required_text(body: dict[str, Any], field: str, **kwargs: Any) -> str:
    value = text(body, field, **kwargs)
    assert value is not None
    return value


def integer(
    value: Any, field: str, least: int = -MAX_INT, most: int = MAX_INT, *, message: str = ""
) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ProtocolError(field, message or f"{field} must be an integer from {least} to {most}.")
    return value


def optional_int(body: dict[str, Any], field: str) -> int | None:
    value = body.get(field)
    if value is None:
        return None
    return integer(value, field, -(2**31), 2**31, message=f"{field} must be an integer or null.")


def number(value: Any, field: str, most: float, *, message: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= most:
        raise ProtocolError(field, message)
    return value


def boolean(body: dict[str, Any], field: str, default: bool | None = None) -> bool:
    value = body.get(field, default)
    if not isinstance(value, bool):
        raise ProtocolError(field, f"{field} must be true or false.")
    return value


def moment(value: Any, field: str, *, optional: bool = False) -> datetime | None:
    """An ISO 8601 time with its offset (null too when `optional`)."""
    if value is None and optional:
        return None
    found = parse_moment(value)
    if found is None:
        nothing = ", or null" if optional else ""
        raise ProtocolError(field, f"{field} must be an ISO 8601 time with its offset{nothing}.")
    return found


def required_moment(value: Any, field: str) -> datetime:
    found = moment(value, field)
    assert found is not None
    return found


def strings(value: Any, field: str, most: int, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > most:
        raise ProtocolError(field, f"{field} must be {what}.")
    if not all(isinstance(item, str) for item in value):
        raise ProtocolError(field, f"{field} must be {what}.")
    return tuple(value)
