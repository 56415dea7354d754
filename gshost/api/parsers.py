import io
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from gshost.api.errors import payload_too_large


class JsonObjectParser(JSONParser):
    """JSON bodies must be objects; anything else is `400 invalid_request`."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        # Read at most one byte past the limit: a 20 MB body costs us 1 MiB, not 20.
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise payload_too_large()
        try:
            data = super().parse(io.BytesIO(raw), media_type, parser_context)
        except RecursionError:  # absurdly deep nesting: unparseable for us, not a server error
            raise ParseError("The body is nested too deeply.") from None
        if not isinstance(data, dict):
            raise ParseError("The body must be a JSON object.")
        return data
