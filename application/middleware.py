"""The Application API's conventions around every call under /api/application/v1: the
error envelope for unhandled errors, a query parameter given twice refused, rate-limit
headers, and the audit (every call made with a known integration key: in the integration's
own record, and, when the call was about a customer, in that customer's audit trail)."""

from collections.abc import Callable
from typing import Any

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse

from application.authentication import IntegrationRecord
from application.models import IntegrationCall
from audit.recording import record_integration_call
from gshost.api.client_ip import client_ip
from gshost.api.errors import ErrorCode, as_api_error, invalid_request
from gshost.api.middleware import (
    NAMES_NOTHING,
    add_rate_limit_headers,
    drop_options_from_allow,
    envelope,
    logger,
)
from gshost.api.query import repeated_params

PREFIX = "/api/application/v1"
Handler = Callable[[HttpRequest], HttpResponse]


def is_application_api(request: HttpRequest) -> bool:
    return request.path_info == PREFIX or request.path_info.startswith(PREFIX + "/")


class ApplicationApiMiddleware:
    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not is_application_api(request):
            return self.get_response(request)
        response = self.get_response(request)
        add_rate_limit_headers(request, response)
        drop_options_from_allow(response)
        _audit(request, response)
        return response

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponse | None:
        if not is_application_api(request):
            return None
        repeated = repeated_params(request.GET)
        if repeated:
            return envelope(
                request, invalid_request("A query parameter is given more than once.", repeated)
            )
        # A path id holding a character no id has names nothing (PostgreSQL could not even
        # compare it): the view gets an id that names nothing, and answers its own 404.
        for name, value in view_kwargs.items():
            if isinstance(value, str) and not value.isprintable():
                view_kwargs[name] = NAMES_NOTHING
        return None

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_application_api(request):
            return None
        error = as_api_error(exception)
        if error.code == ErrorCode.INTERNAL_ERROR:
            logger.exception("Unhandled error in %s %s", request.method, request.path)
        return envelope(request, error)


def _action(request: HttpRequest) -> str:
    match = request.resolver_match
    return match.url_name or "unknown" if match is not None else "unknown"


def _audit(request: HttpRequest, response: HttpResponse) -> None:
    key: IntegrationRecord | None = getattr(request, "audit_integration", None)
    if key is None:
        return  # a typo, a foreign string or an unknown key id: attributed to no key
    organization_id = getattr(request, "audit_organization_id", "")
    server_id = getattr(request, "audit_server_id", "")
    try:
        _record(request, response, key, organization_id, server_id)
    except DatabaseError:  # the answer stands: the rows are the truth, not this record
        logger.warning("Could not record the integration call %s %s", request.method, request.path)


def _record(
    request: HttpRequest,
    response: HttpResponse,
    key: IntegrationRecord,
    organization_id: str,
    server_id: str,
) -> None:
    IntegrationCall.objects.create(
        integration_id=key.pk,
        method=(request.method or "")[:10],
        path=request.path[:500].replace("\x00", "\ufffd"),
        action=_action(request),
        status_code=response.status_code,
        error_code=getattr(request, "api_error_code", ""),
        organization_id=organization_id,
        server_id=server_id,
        ip=client_ip(request),
        user_agent=request.META.get("HTTP_USER_AGENT", "")[:500].replace("\x00", "\ufffd"),
        request_id=getattr(request, "request_id", ""),
    )
    if organization_id:
        record_integration_call(
            request, response, organization_id=organization_id, key_id=key.key_id
        )
