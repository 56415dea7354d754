"""The OpenAPI schema's shared parts: the bearer key scheme, and one post-processing hook that
gives every operation its error responses and every list its page shape.

The hook works on the finished schema, so a route added later gets the same treatment without
any annotation: the error codes follow from what the operation is (authenticated, has a body,
takes path or query parameters, acts on a server). A view adds codes only its route answers with
``extend_schema(extensions={ERROR_CODES: {422: ["unknown_event"]}})``.
"""

from typing import Any, Final

from drf_spectacular.extensions import OpenApiAuthenticationExtension

ERROR_CODES: Final = "x-error-codes"
MAX_LIMIT: Final = 100
_ERROR_REF: Final = {"$ref": "#/components/schemas/Error"}
_BODY_METHODS: Final = frozenset({"post", "put", "patch"})

_STATUS_TEXT: Final = {
    400: (
        "The request is not valid (body, parameters or filters), or gives a query parameter "
        "more than once."
    ),
    401: "No key, or a key that cannot be used.",
    403: "The key may not do this.",
    404: "No such object for this key.",
    409: "Not allowed in the server's current state.",
    413: "The request body is larger than 1 MiB.",
    422: "Understood, but refused.",
    429: "Too many requests in this minute.",
    501: "The server's game does not support this.",
    503: "The server's node is unavailable; nothing was done or queued. Retry after Retry-After.",
}

ERROR_SCHEMA: Final = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "required_scope": {"type": "string"},
                "rule": {"type": "string"},
                "reason": {"type": "string"},
                "field": {"type": "string"},
                "fields": {
                    "type": "object",
                    "additionalProperties": {"type": "array", "items": {"type": "string"}},
                },
                "capability": {"type": "string"},
                "state": {"type": "string"},
                "retry_after": {"type": "integer", "minimum": 1},
                "limit": {"type": "integer", "minimum": 0},
            },
        }
    },
}

# Answered by the web server (gunicorn's limit_request_line, 4094 bytes by default) before the
# API sees the request, so in plain text rather than the error envelope.
REQUEST_LINE_TOO_LONG: Final = {
    "description": (
        "The request line (method, path and query string) is longer than the web server "
        "accepts; answered by the web server, with a plain-text body."
    )
}

CURSOR_PATTERN: Final = "^[np][0-9]{16}[A-Za-z0-9_]{1,40}$"  # gshost.api.pagination's
MAX_CURSOR_LENGTH: Final = 57
PAGE_PARAMETERS: Final = [
    {
        "in": "query",
        "name": "limit",
        "required": False,
        "description": (
            f"Rows per page, default 50. At most {MAX_LIMIT} rows are returned: a larger value "
            f"is treated as {MAX_LIMIT}."
        ),
        "schema": {"type": "integer", "minimum": 1},
    },
    {
        "in": "query",
        "name": "cursor",
        "required": False,
        "description": (
            "Taken from a page's `next` or `previous` link, unchanged. A value of this shape is "
            "a position in the list (`n` for older rows, `p` for newer, microseconds since 1970, "
            "an id); any other value is `400 invalid_request`."
        ),
        "schema": {
            "type": "string",
            "minLength": 18,
            "maxLength": MAX_CURSOR_LENGTH,
            "pattern": CURSOR_PATTERN,
        },
    },
]


class BearerKeyScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.BearerKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "gsk_<key id>_<secret> (56 characters)",
            "description": "An API key created in the panel (Account -> API Keys).",
        }


def routes_under(prefix: str, endpoints: list[Any]) -> list[Any]:
    return [endpoint for endpoint in endpoints if str(endpoint[0]).startswith(prefix + "/")]


def public_routes_only(endpoints: list[Any], **kwargs: Any) -> list[Any]:
    """drf-spectacular PREPROCESSING_HOOKS entry: the Customer API's routes, no other API's."""
    return routes_under("/api/public/v1", endpoints)


def postprocess_schema(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular POSTPROCESSING_HOOKS entry: errors and pages for every operation."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            _paginate(operation, method, str(result.get("openapi", "3.0")))
            codes = error_codes(path, method, operation)
            for status, names in codes.items():
                operation["responses"].setdefault(str(status), _error_response(status, names))
            operation["responses"].setdefault("414", REQUEST_LINE_TOO_LONG)
            operation["responses"] = dict(sorted(operation["responses"].items()))
    return result


def _paginate(operation: dict[str, Any], method: str, version: str) -> None:
    """Every list of the API is a page: an array answer is documented as one, with its limits."""
    media = operation["responses"].get("200", {}).get("content", {}).get("application/json", {})
    schema = media.get("schema")
    if method != "get" or not schema:
        return
    if schema.get("type") == "array":
        media["schema"] = page_schema(schema, version)
    elif not _is_page(schema):
        return
    kept = [
        p
        for p in operation.get("parameters", [])
        if not (p.get("in") == "query" and p.get("name") in {"limit", "cursor"})
    ]
    operation["parameters"] = kept + PAGE_PARAMETERS


def _is_page(schema: dict[str, Any]) -> bool:
    if "$ref" in schema:
        return str(schema["$ref"]).split("/")[-1].startswith("Paginated")
    return set(schema.get("properties", {})) == {"results", "next", "previous"}


def page_schema(items: dict[str, Any], version: str) -> dict[str, Any]:
    nullable_url: dict[str, Any] = {"type": "string", "format": "uri", "nullable": True}
    if version.startswith("3.1"):
        nullable_url = {"type": ["string", "null"], "format": "uri"}
    return {
        "type": "object",
        "required": ["results", "next", "previous"],
        "properties": {"results": items, "next": nullable_url, "previous": nullable_url},
    }


def error_codes(path: str, method: str, operation: dict[str, Any]) -> dict[int, list[str]]:
    """The error codes an operation can answer, by status."""
    codes: dict[int, list[str]] = {}

    def add(status: int, *names: str) -> None:
        codes.setdefault(status, [])
        codes[status] += [n for n in names if n not in codes[status]]

    if operation.get("security"):
        add(401, "missing_token", "invalid_token", "token_expired", "token_revoked")
        add(403, "insufficient_scope", "ip_not_allowed")
        add(429, "rate_limited")
    add(400, "invalid_request")  # at least: a query parameter given more than once
    if method in _BODY_METHODS:
        add(413, "payload_too_large")
    if "{server_id}" in path:
        add(404, "server_not_found")
    if any(p.get("in") == "path" and p.get("name") != "server_id" for p in _path_params(path)):
        add(404, "not_found")
    if "/{server_id}/" in path or "/jobs/" in path:
        add(403, "feature_not_enabled")
        add(501, "not_supported")
        if method in _BODY_METHODS:
            add(409, "invalid_state")
        if method in _BODY_METHODS or method == "delete":  # every action on a server
            add(409, "server_suspended")
    for status, names in operation.pop(ERROR_CODES, {}).items():
        add(int(status), *names)
    return dict(sorted(codes.items()))


def _path_params(path: str) -> list[dict[str, str]]:
    return [
        {"in": "path", "name": part[1:-1]}
        for part in path.split("/")
        if part.startswith("{") and part.endswith("}")
    ]


def _error_response(status: int, names: list[str]) -> dict[str, Any]:
    schema = {
        "allOf": [
            _ERROR_REF,
            {"properties": {"error": {"properties": {"code": {"type": "string", "enum": names}}}}},
        ]
    }
    response: dict[str, Any] = {
        "description": f"{_STATUS_TEXT.get(status, 'Error')} Codes: {', '.join(names)}.",
        "content": {"application/json": {"schema": schema}},
    }
    if status == 401:
        response["headers"] = {
            "WWW-Authenticate": {"schema": {"type": "string"}, "description": "Always sent."}
        }
    if status in (429, 503):
        response["headers"] = {
            "Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait."}
        }
    return response
