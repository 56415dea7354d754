"""Reading a request's body through an input serializer, the same way on every route."""

from typing import Any

from rest_framework import serializers
from rest_framework.request import Request


def parse_input(
    request: Request, serializer_class: type[serializers.Serializer[Any]]
) -> dict[str, Any]:
    """The validated body, or DRF's ValidationError, which the exception handler answers as
    400 invalid_request naming the bad fields."""
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)
