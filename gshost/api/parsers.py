from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class JsonObjectParser(JSONParser):
    """JSON bodies must be objects; anything else is `400 invalid_request`."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # absurdly deep nesting: unparseable for us, not a server error
            raise ParseError("The body is nested too deeply.") from None
        if not isinstance(data, dict):
            raise ParseError("The body must be a JSON object.")
        return data
