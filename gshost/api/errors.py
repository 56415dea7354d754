"""The contract's error envelope: `{"error": {"code", "message", ...extras}}` for every error."""

import logging
from enum import StrEnum
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response

from gshost.errors import (
    DomainError,
    InvalidInput,
    InvalidState,
    LimitReached,
    Misuse,
    NotEnabled,
    NotFound,
    NotPermitted,
    NotSupported,
    RateLimited,
    RefusedValue,
    TooLarge,
    Unavailable,
)

logger = logging.getLogger(__name__)

WWW_AUTHENTICATE = 'Bearer error="invalid_token"'


class ErrorCode(StrEnum):
    INVALID_REQUEST = "invalid_request"
    MISSING_TOKEN = "missing_token"
    INVALID_TOKEN = "invalid_token"
    TOKEN_EXPIRED = "token_expired"
    TOKEN_REVOKED = "token_revoked"
    INSUFFICIENT_SCOPE = "insufficient_scope"
    IP_NOT_ALLOWED = "ip_not_allowed"
    FEATURE_NOT_ENABLED = "feature_not_enabled"
    SERVER_NOT_FOUND = "server_not_found"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    INVALID_STATE = "invalid_state"
    DISK_LIMIT_EXCEEDED = "disk_limit_exceeded"
    SERVER_SUSPENDED = "server_suspended"
    INVALID_WEBHOOK_URL = "invalid_webhook_url"
    UNKNOWN_EVENT = "unknown_event"
    CONFLICTING_FIELDS = "conflicting_fields"
    SCOPE_EXCEEDS_PERMISSIONS = "scope_exceeds_permissions"
    LIMIT_REACHED = "limit_reached"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    RATE_LIMITED = "rate_limited"
    NOT_SUPPORTED = "not_supported"
    NODE_UNAVAILABLE = "node_unavailable"
    UNAVAILABLE = "unavailable"
    MIGRATION_REFUSED = "migration_refused"
    NO_NODE_FITS = "no_node_fits"
    SERVER_NOT_ON_NODE = "server_not_on_node"  # the node routes' (`/internal/nodes/…`)
    JOB_NOT_ON_NODE = "job_not_on_node"
    TOKEN_REFUSED = "token_refused"  # a console token a node passed on (console-commands)
    SFTP_LOGIN_REFUSED = "sftp_login_refused"  # the node route `/api/node/v1/sftp-auth`
    SERVICE_UNAVAILABLE = "service_unavailable"
    # The Application API's (billing systems).
    NO_CAPACITY = "no_capacity"
    EXTERNAL_ID_CONFLICT = "external_id_conflict"
    CUSTOMER_HAS_SERVERS = "customer_has_servers"
    PLAN_IN_USE = "plan_in_use"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    IDEMPOTENCY_KEY_IN_USE = "idempotency_key_in_use"
    # Files (servers.files)
    INVALID_PATH = "invalid_path"
    PATH_OUTSIDE_SERVER = "path_outside_server"
    FILE_DENIED = "file_denied"
    FILE_NOT_FOUND = "file_not_found"
    NOT_A_DIRECTORY = "not_a_directory"
    NOT_A_FILE = "not_a_file"
    FILE_EXISTS = "file_exists"
    DIRECTORY_NOT_EMPTY = "directory_not_empty"
    FILE_TOO_LARGE = "file_too_large"
    INVALID_ARCHIVE = "invalid_archive"
    INVALID_URL = "invalid_url"
    PULL_FAILED = "pull_failed"
    INTERNAL_ERROR = "internal_error"
    # The panel's sign-in (a second factor); no API route raises them, but the edge knows them.
    CODE_REFUSED = "code_refused"
    PASSKEY_REFUSED = "passkey_refused"
    SIGN_IN_LOCKED = "sign_in_locked"
    # The panel's SSH key pages; no API route raises it.
    SSH_KEY_REFUSED = "ssh_key_refused"


DEFAULT_MESSAGES = {
    ErrorCode.MISSING_TOKEN: "Send your API key as `Authorization: Bearer <API_KEY>`.",
    ErrorCode.INVALID_TOKEN: "The API key is not valid.",
    ErrorCode.TOKEN_EXPIRED: "The API key has expired.",
    ErrorCode.TOKEN_REVOKED: "The API key has been revoked.",
    ErrorCode.SERVER_NOT_FOUND: "No such server.",
    ErrorCode.NOT_FOUND: "Not found.",
    ErrorCode.PAYLOAD_TOO_LARGE: "The request body is larger than 1 MiB.",
    ErrorCode.RATE_LIMITED: "Too many requests; retry after the time given in Retry-After.",
    ErrorCode.INTERNAL_ERROR: "Something went wrong on our side. Retry later.",
    ErrorCode.SERVICE_UNAVAILABLE: "The service cannot reach its database just now. Retry later.",
}
# What a caller is told to wait after a database outage: a restarted pooler or a failed-over
# primary is usually back within seconds.
DATABASE_RETRY_AFTER_SECONDS = 5


class ApiError(exceptions.APIException):
    """An error with the contract's code and any of its listed extra members."""

    def __init__(
        self,
        status_code: int,
        code: ErrorCode,
        message: str | None = None,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        self.status_code = status_code
        self.code = code
        self.message = message or DEFAULT_MESSAGES.get(code, code.value.replace("_", " "))
        self.extra = extra
        self.headers = headers or {}
        super().__init__(self.message, code.value)

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code.value, "message": self.message, **self.extra}}


def not_found(what: str = "Not found.") -> ApiError:
    return ApiError(404, ErrorCode.NOT_FOUND, what)


def rate_limited(retry_after: int) -> ApiError:
    return ApiError(
        429,
        ErrorCode.RATE_LIMITED,
        retry_after=retry_after,
        headers={"Retry-After": str(retry_after)},
    )


def database_unavailable() -> ApiError:
    retry_after = DATABASE_RETRY_AFTER_SECONDS
    return ApiError(
        503,
        ErrorCode.SERVICE_UNAVAILABLE,
        retry_after=retry_after,
        headers={"Retry-After": str(retry_after)},
    )


def is_database_outage(exc: BaseException) -> bool:
    """The database (or the pooler in front of it) could not be reached or dropped the
    connection: the request's transaction was rolled back, so a retry is safe."""
    return isinstance(exc, OperationalError | InterfaceError)


def payload_too_large() -> ApiError:
    return ApiError(413, ErrorCode.PAYLOAD_TOO_LARGE)


def invalid_request(message: str, fields: dict[str, list[str]] | None = None) -> ApiError:
    if fields is None:
        return ApiError(400, ErrorCode.INVALID_REQUEST, message)
    return ApiError(400, ErrorCode.INVALID_REQUEST, message, fields=fields)


# The one place a domain refusal becomes an HTTP status (the panel asks here too).
DOMAIN_STATUS: dict[type[DomainError], int] = {
    NotFound: status.HTTP_404_NOT_FOUND,
    InvalidState: status.HTTP_409_CONFLICT,
    NotSupported: status.HTTP_501_NOT_IMPLEMENTED,
    NotEnabled: status.HTTP_403_FORBIDDEN,
    InvalidInput: status.HTTP_400_BAD_REQUEST,
    RefusedValue: status.HTTP_422_UNPROCESSABLE_ENTITY,
    Unavailable: status.HTTP_503_SERVICE_UNAVAILABLE,
    LimitReached: status.HTTP_422_UNPROCESSABLE_ENTITY,
    NotPermitted: status.HTTP_403_FORBIDDEN,
    RateLimited: status.HTTP_429_TOO_MANY_REQUESTS,
    TooLarge: status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    Misuse: status.HTTP_500_INTERNAL_SERVER_ERROR,
}


def domain_status(error: DomainError) -> int:
    kind = next((kind for kind in DOMAIN_STATUS if isinstance(error, kind)), None)
    return DOMAIN_STATUS[kind] if kind is not None else status.HTTP_400_BAD_REQUEST


def from_domain_error(error: DomainError) -> ApiError:
    retry_after = error.extra.get("retry_after")
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return ApiError(
        domain_status(error), ErrorCode(error.code), error.message, headers=headers, **error.extra
    )


def _validation_fields(detail: Any) -> dict[str, list[str]]:
    if isinstance(detail, dict):
        return {str(name): _messages(value) for name, value in detail.items()}
    return {"non_field_errors": _messages(detail)}


def _messages(value: Any) -> list[str]:
    if isinstance(value, list):
        return [m for item in value for m in _messages(item)]
    if isinstance(value, dict):
        return [f"{k}: {m}" for k, v in value.items() for m in _messages(v)]
    return [str(value)]


def as_api_error(exc: Exception) -> ApiError:
    """Translate DRF's and Django's own exceptions into the contract's codes."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, DomainError):
        return from_domain_error(exc)
    if isinstance(exc, RequestDataTooBig):
        return payload_too_large()
    if is_database_outage(exc):
        return database_unavailable()
    if isinstance(exc, OverflowError):  # a value beyond what a date or number can hold
        return invalid_request("A value in the request is out of range.")
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        return ApiError(401, ErrorCode.MISSING_TOKEN)
    if isinstance(exc, exceptions.ValidationError):
        return invalid_request("The request is not valid.", _validation_fields(exc.detail))
    if isinstance(exc, exceptions.ParseError | exceptions.UnsupportedMediaType):
        return invalid_request("The body must be a JSON object.")
    if isinstance(exc, exceptions.MethodNotAllowed):
        return ApiError(405, ErrorCode.METHOD_NOT_ALLOWED, str(exc.detail))
    if isinstance(exc, exceptions.NotFound | Http404):
        return not_found()
    if isinstance(exc, exceptions.PermissionDenied):
        return ApiError(403, ErrorCode.INSUFFICIENT_SCOPE, str(exc.detail))
    if isinstance(exc, exceptions.Throttled):
        return rate_limited(int(getattr(exc, "wait", None) or 1))
    if isinstance(exc, exceptions.APIException):
        return ApiError(exc.status_code, ErrorCode.INVALID_REQUEST, str(exc.detail))
    return ApiError(500, ErrorCode.INTERNAL_ERROR)


def _headers(error: ApiError) -> dict[str, str]:
    headers = dict(error.headers)
    if error.status_code == status.HTTP_401_UNAUTHORIZED:
        headers["WWW-Authenticate"] = WWW_AUTHENTICATE
    return headers


def error_response(error: ApiError, request: HttpRequest | None = None) -> Response:
    if request is not None:
        request.api_error_code = error.code.value  # type: ignore[attr-defined]
    return Response(error.body(), status=error.status_code, headers=_headers(error))


def json_error_response(error: ApiError) -> JsonResponse:
    """The same answer for a plain Django view (the node routes), without DRF's renderers."""
    return JsonResponse(error.body(), status=error.status_code, headers=_headers(error))


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    handled = exceptions.APIException | Http404 | DomainError | RequestDataTooBig | OverflowError
    if isinstance(exc, Misuse) or (not isinstance(exc, handled) and not is_database_outage(exc)):
        return None  # a real bug: PublicApiMiddleware answers 500 with the envelope, and logs it
    request = context.get("request")
    django_request = getattr(request, "_request", None)
    return error_response(as_api_error(exc), django_request)
