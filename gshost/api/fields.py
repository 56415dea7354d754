from datetime import datetime
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gshost.ids import format_timestamp


@extend_schema_field(OpenApiTypes.DATETIME)
class TimestampField(serializers.Field):
    """ISO 8601 UTC with milliseconds and `Z`."""

    def to_representation(self, value: datetime) -> str | None:
        return format_timestamp(value)

    def to_internal_value(self, data: Any) -> datetime:
        return serializers.DateTimeField().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """A JSON string only: DRF's CharField would turn 0 or true into text, unlike the schema."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)
