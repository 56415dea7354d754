"""Keyset cursor pagination, newest first: `?limit=` (1-100, default 50) and `?cursor=`.

The cursor holds the (timestamp, id) of the row it continues from, so pages stay stable while
new rows arrive, ties on the timestamp are broken by id, and every row can be reached.
"""

import base64
import binascii
import json
import re
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Model, Q, QuerySet
from django.utils.dateparse import parse_datetime
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from gshost.api.errors import ApiError, invalid_request

DEFAULT_LIMIT = 50
MAX_LIMIT = 100
_LIMIT_MESSAGE = "limit must be an integer from 1 to 100."
_DIGITS = re.compile(r"[0-9]+")  # no sign, space, underscore or non-ASCII digit
# What the API hands out: URL-safe base64 without padding, of a small JSON object.
CURSOR_PATTERN = "^[A-Za-z0-9_-]+$"
MAX_CURSOR_LENGTH = 512


def parse_limit(raw: str | None) -> int:
    """`?limit=`: absent is the default; digits only; above MAX_LIMIT is MAX_LIMIT."""
    if raw is None:
        return DEFAULT_LIMIT
    if _DIGITS.fullmatch(raw) is None:
        raise invalid_request(_LIMIT_MESSAGE, {"limit": ["Not an integer."]}) from None
    digits = raw.lstrip("0") or "0"
    # However many digits: a number that long is far above the maximum (and int() of thousands
    # of digits would be refused by Python itself).
    limit = int(digits) if len(digits) <= len(str(MAX_LIMIT)) else MAX_LIMIT
    if limit < 1:
        raise invalid_request(_LIMIT_MESSAGE, {"limit": ["Must be at least 1."]})
    return min(limit, MAX_LIMIT)


def _encode(moment: str, pk: str, backwards: bool) -> str:
    raw = json.dumps({"t": moment, "i": pk, "b": backwards}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _bad_cursor() -> ApiError:
    return invalid_request("The cursor is not valid.", {"cursor": ["Not valid."]})


def _decode(cursor: str) -> tuple[datetime, str, bool]:
    if len(cursor) > MAX_CURSOR_LENGTH or re.fullmatch(CURSOR_PATTERN, cursor) is None:
        raise _bad_cursor()
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        moment = parse_datetime(data["t"])
        if moment is None or moment.tzinfo is None:
            raise _bad_cursor()
        pk = str(data["i"])
        if not pk.isprintable():  # NUL or a lone surrogate: no id has one, PostgreSQL none
            raise _bad_cursor()
        # In UTC now: a forged time at the edge of the calendar fails here, not in the query.
        return moment.astimezone(UTC), pk, bool(data["b"])
    except (ValueError, KeyError, TypeError, OverflowError, binascii.Error, UnicodeDecodeError):
        raise _bad_cursor() from None


def _cursor_pk(queryset: QuerySet[Any], pk: str) -> Any:
    """The cursor's id as the model's key type; a forged one is refused, not a 500."""
    try:
        return queryset.model._meta.pk.to_python(pk)
    except ValidationError:
        raise _bad_cursor() from None


class NewestFirstCursorPagination(BasePagination):
    """Views name their timestamp field with `ordering_field` (default `created_at`)."""

    def paginate_queryset(  # type: ignore[override]
        self, queryset: QuerySet[Any], request: Request, view: Any = None
    ) -> list[Any]:
        self.request = request
        self.field = getattr(view, "ordering_field", "created_at")
        limit = parse_limit(request.query_params.get("limit"))
        raw_cursor = request.query_params.get("cursor")
        moment, pk, backwards = _decode(raw_cursor) if raw_cursor is not None else (None, "", False)
        rows = self._slice(queryset, moment, pk, backwards, limit)
        has_more = len(rows) > limit
        rows = rows[:limit]
        if backwards:
            rows.reverse()
        self.page = rows
        came_from_cursor = moment is not None
        self.has_next = has_more if not backwards else came_from_cursor
        self.has_previous = has_more if backwards else came_from_cursor
        return rows

    def _slice(
        self, queryset: QuerySet[Any], moment: Any, pk: str, backwards: bool, limit: int
    ) -> list[Any]:
        field = self.field
        if moment is not None:
            pk_value = _cursor_pk(queryset, pk)
            op = "gt" if backwards else "lt"
            after = Q(**{f"{field}__{op}": moment}) | Q(**{field: moment, f"pk__{op}": pk_value})
            queryset = queryset.filter(after)
        order = (field, "pk") if backwards else (f"-{field}", "-pk")
        return list(queryset.order_by(*order)[: limit + 1])

    def _link(self, row: Model | None, backwards: bool) -> str | None:
        if row is None:
            return None
        moment = getattr(row, self.field).isoformat()
        url = self.request.build_absolute_uri()
        return replace_query_param(url, "cursor", _encode(moment, str(row.pk), backwards))

    def get_next_link(self) -> str | None:
        return self._link(self.page[-1], False) if self.has_next and self.page else None

    def get_previous_link(self) -> str | None:
        if not self.has_previous:
            return None
        if not self.page:
            return remove_query_param(self.request.build_absolute_uri(), "cursor")
        return self._link(self.page[0], True)

    def get_paginated_response(self, data: Any) -> Response:
        return Response(
            {"results": data, "next": self.get_next_link(), "previous": self.get_previous_link()}
        )

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        nullable_url = {"type": "string", "format": "uri", "nullable": True}
        return {
            "type": "object",
            "required": ["results", "next", "previous"],
            "properties": {"results": schema, "next": nullable_url, "previous": nullable_url},
        }
