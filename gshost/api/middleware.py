"""Request ids everywhere; for the public API also the error envelope for unhandled errors,
rate-limit and deprecation headers, and the audit record of every call made with a key."""

import logging
import re
import uuid
from collections.abc import Callable
from email.utils import format_datetime
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from audit.recording import record_api_call
from gshost.api import rate_limits
from gshost.api.client_ip import client_ip
from gshost.api.errors import ApiError, ErrorCode, as_api_error, invalid_request
from gshost.api.query import repeated_params

logger = logging.getLogger(__name__)

API_PREFIX = "/api/public/v1"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")

Handler = Callable[[HttpRequest], HttpResponse]
NAMES_NOTHING = ""  # no row has an empty id


class RequestIdMiddleware:
    """Echo a valid incoming X-Request-Id, else make one; every response carries it."""

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.META.get("HTTP_X_REQUEST_ID", "")
        valid = _REQUEST_ID.fullmatch(incoming) is not None
        request.request_id = incoming if valid else uuid.uuid4().hex  # type: ignore[attr-defined]
        response = self.get_response(request)
        response["X-Request-Id"] = request.request_id  # type: ignore[attr-defined]
        return response


def is_public_api(request: HttpRequest) -> bool:
    return request.path_info == API_PREFIX or request.path_info.startswith(API_PREFIX + "/")


class PublicApiMiddleware:
    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not is_public_api(request):
            return self.get_response(request)
        response = self.get_response(request)
        add_rate_limit_headers(request, response)
        self._add_deprecation_headers(request, response)
        drop_options_from_allow(response)
        record_api_call(request, response)
        return response

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponse | None:
        """A query parameter given twice is `400 invalid_request` on every route, before the
        view runs.

        A path id holding a character no id has (NUL, a surrogate, any unprintable one)
        names nothing, and PostgreSQL could not even compare it: the view is given an id that
        names nothing instead, so the route answers its own 404 in its own order (after
        authentication and scope), as for any unknown id. The audit keeps the path as sent."""
        if not is_public_api(request):
            return None
        repeated = repeated_params(request.GET)
        if repeated:
            message = "A query parameter is given more than once."
            return envelope(request, invalid_request(message, repeated))
        hostile = [k for k, v in view_kwargs.items() if isinstance(v, str) and not v.isprintable()]
        if not hostile:
            return None
        match = request.resolver_match
        if match is not None and match.kwargs is view_kwargs:
            match.kwargs = dict(view_kwargs)  # the audit records the ids as they were sent
        for name in hostile:
            view_kwargs[name] = NAMES_NOTHING
        return None

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_public_api(request):
            return None
        error = as_api_error(exception)
        if error.code == ErrorCode.INTERNAL_ERROR:
            logger.exception("Unhandled error in %s %s", request.method, request.path)
        elif error.code == ErrorCode.SERVICE_UNAVAILABLE:
            logger.warning(
                "Database unreachable in %s %s: %s", request.method, request.path, exception
            )
        return envelope(request, error)

    def _add_deprecation_headers(self, request: HttpRequest, response: HttpResponse) -> None:
        key = getattr(request, "api_key_record", None)
        if key is None or key.replaced_by is None or key.rotated_at is None:
            return
        response["Deprecation"] = f"@{int(key.rotated_at.timestamp())}"
        if key.expires_at is not None:
            response["Sunset"] = format_datetime(key.expires_at, usegmt=True)


def add_rate_limit_headers(request: HttpRequest, response: HttpResponse) -> None:
    """The key's limit as the call left it, or the address's limit on failed logins when no
    key was accepted."""
    state = getattr(request, "rate_limit_state", None)
    if state is None:
        limit = rate_limits.parse_rate(settings.AUTH_FAILURE_RATE)
        state = rate_limits.peek(f"authfail:{client_ip(request)}", limit)
    for name, value in state.headers().items():
        response[name] = value


def drop_options_from_allow(response: HttpResponse) -> None:
    """The API offers no OPTIONS (no view declares a scope for it, so it is 405), but DRF lists
    it in `Allow` on every view; say what is actually allowed."""
    allow = response.get("Allow")
    if allow is not None:
        response["Allow"] = ", ".join(m for m in allow.split(", ") if m != "OPTIONS")


def envelope(request: HttpRequest, error: ApiError) -> JsonResponse:
    """The error envelope outside DRF (unhandled errors, Django's own 404)."""
    request.api_error_code = error.code.value  # type: ignore[attr-defined]
    response = JsonResponse(error.body(), status=error.status_code)
    for name, value in error.headers.items():
        response[name] = value
    return response
