"""Keyset cursor pagination, newest first: `?limit=` (1-100, default 50) and `?cursor=`.

The cursor holds the (timestamp, id) of the row it continues from, so pages stay stable while
new rows arrive, ties on the timestamp are broken by id, and every row can be reached. Its
shape is all the schema's pattern says: the direction (`n` older, `p` newer), the timestamp in
microseconds since 1970 (16 digits, UTC), then the id. Any value of that shape is a position,
so the API takes every cursor the schema allows.
"""

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Model, Q, QuerySet
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from gshost.api.errors import ApiError, invalid_request

DEFAULT_LIMIT = 50
MAX_LIMIT = 100
_DIGITS = re.compile(r"[0-9]+")  # no sign, space, underscore or non-ASCII digit
# What the API hands out, and all that it takes: direction, microseconds since 1970, the id
# (every id the API pages by: a type prefix and base62, or an API key's id).
CURSOR_PATTERN = "^[np][0-9]{16}[A-Za-z0-9_]{1,40}$"
MAX_CURSOR_LENGTH = 57
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_limit(raw: str | None, *, default: int = DEFAULT_LIMIT, most: int = MAX_LIMIT) -> int:
    """`?limit=`: absent is `default`; digits only; above `most` is `most`."""
    if raw is None:
        return default
    message = f"limit must be an integer from 1 to {most}."
    if _DIGITS.fullmatch(raw) is None:
        raise invalid_request(message, {"limit": ["Not an integer."]}) from None
    digits = raw.lstrip("0") or "0"
    # However many digits: a number that long is far above the maximum (and int() of thousands
    # of digits would be refused by Python itself).
    limit = int(digits) if len(digits) <= len(str(most)) else most
    if limit < 1:
        raise invalid_request(message, {"limit": ["Must be at least 1."]})
    return min(limit, most)


def _encode(moment: datetime, pk: str, backwards: bool) -> str:
    micros = (moment - _EPOCH) // timedelta(microseconds=1)
    return f"{'p' if backwards else 'n'}{micros:016d}{pk}"


def _bad_cursor() -> ApiError:
    return invalid_request("The cursor is not valid.", {"cursor": ["Not valid."]})


def _decode(cursor: str) -> tuple[datetime, str, bool]:
    if len(cursor) > MAX_CURSOR_LENGTH or re.fullmatch(CURSOR_PATTERN, cursor) is None:
        raise _bad_cursor()
    moment = _EPOCH + timedelta(microseconds=int(cursor[1:17]))
    return moment, cursor[17:], cursor[0] == "p"


def _cursor_id(queryset: QuerySet[Any], tiebreak: str, value: str) -> Any:
    """The cursor's id as the tie-break field's type; one that cannot be is refused, not a 500."""
    meta = queryset.model._meta
    field = meta.pk if tiebreak == "pk" else meta.get_field(tiebreak)
    try:
        return field.to_python(value)
    except ValidationError:
        raise _bad_cursor() from None


class NewestFirstCursorPagination(BasePagination):
    """Views name their timestamp field with `ordering_field` (default `created_at`), and the
    unique text field that breaks ties with `cursor_tiebreak` (default the primary key: a
    model whose key is a number names another, as a cursor's id is text)."""

    def paginate_queryset(  # type: ignore[override]
        self, queryset: QuerySet[Any], request: Request, view: Any = None
    ) -> list[Any]:
        self.request = request
        self.field = getattr(view, "ordering_field", "created_at")
        self.tiebreak = getattr(view, "cursor_tiebreak", "pk")
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
        field, tiebreak = self.field, self.tiebreak
        if moment is not None:
            value = _cursor_id(queryset, tiebreak, pk)
            op = "gt" if backwards else "lt"
            beyond = Q(**{f"{field}__{op}": moment})
            queryset = queryset.filter(beyond | Q(**{field: moment, f"{tiebreak}__{op}": value}))
        order = (field, tiebreak) if backwards else (f"-{field}", f"-{tiebreak}")
        return list(queryset.order_by(*order)[: limit + 1])

    def _link(self, row: Model | None, backwards: bool) -> str | None:
        if row is None:
            return None
        moment = getattr(row, self.field)
        url = self.request.build_absolute_uri()
        cursor = _encode(moment, str(getattr(row, self.tiebreak)), backwards)
        return replace_query_param(url, "cursor", cursor)

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
