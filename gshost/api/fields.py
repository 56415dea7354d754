from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gshost.ids import format_timestamp

# Date-times the service can store and compute with. Outside this range (say year 1 or 9999
# with an offset, which does not even fit a datetime once turned into UTC) a value is refused
# as `400 invalid_request` naming the field, rather than failing deeper down.
USABLE_FROM = datetime(1970, 1, 1, tzinfo=UTC)
USABLE_UNTIL = datetime(9999, 1, 1, tzinfo=UTC)
DATETIME_RULE = (
    "Must be an ISO 8601 timestamp with a time zone, from 1970-01-01T00:00:00Z "
    "up to (not including) 9999-01-01T00:00:00Z."
)


def parse_usable_datetime(raw: object) -> datetime | None:
    """An aware datetime in UTC within the usable range, or None when `raw` is not one."""
    if not isinstance(raw, str):
        return None
    try:
        moment = parse_datetime(raw)
        if moment is None or moment.tzinfo is None:
            return None
        moment = moment.astimezone(UTC)
    except (ValueError, OverflowError):  # "2026-13-45…", or 9999-12-31T23:59-23:59 in UTC
        return None
    return moment if USABLE_FROM <= moment < USABLE_UNTIL else None


@extend_schema_field(OpenApiTypes.DATETIME)
class UsableDateTimeField(serializers.Field):
    """A date-time input: ISO 8601 with a time zone, within the usable range."""

    default_error_messages = {"invalid": DATETIME_RULE}

    def to_internal_value(self, data: Any) -> datetime:
        moment = parse_usable_datetime(data)
        if moment is None:
            self.fail("invalid")
        return moment

    def to_representation(self, value: datetime) -> str | None:
        return format_timestamp(value)


@extend_schema_field(OpenApiTypes.DATETIME)
class TimestampField(serializers.Field):
    """ISO 8601 UTC with milliseconds and `Z`."""

    def to_representation(self, value: datetime) -> str | None:
        return format_timestamp(value)

    def to_internal_value(self, data: Any) -> datetime:
        return UsableDateTimeField().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """A JSON string only: DRF's CharField would turn 0 or true into text, unlike the schema."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)
