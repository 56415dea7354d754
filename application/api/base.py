"""What every Application API view shares: integration-key authentication, a declared scope
per method, idempotent writes, pagination, and naming what a call was about for the audit."""

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from application.authentication import (
    HasIntegrationScope,
    IntegrationKeyAuthentication,
    calling_integration,
)
from application.idempotency import HEADER, About, clean_key, idempotent, request_hash
from gshost.api.errors import as_api_error, error_response, invalid_request
from gshost.api.pagination import NewestFirstCursorPagination
from gshost.errors import DomainError

UNPRINTABLE = "Must be printable text."


class ApplicationView(APIView):
    authentication_classes = [IntegrationKeyAuthentication]
    permission_classes = [HasIntegrationScope]
    scopes: dict[str, str] = {}

    def integration_pk(self, request: Request) -> int:
        return calling_integration(request).pk

    def page(
        self, request: Request, rows: QuerySet[Any], present: Callable[[Any], Any]
    ) -> Response:
        paginator = NewestFirstCursorPagination()
        found = paginator.paginate_queryset(rows, request, self)
        return paginator.get_paginated_response([present(row) for row in found])

    def write(self, request: Request, carry_out: Callable[[], Response]) -> Response:
        """Carry out a POST, PATCH or DELETE once per `Idempotency-Key` (when one is sent)."""
        key = clean_key(request.headers.get(HEADER))
        body = request.data if request.method in ("POST", "PATCH") else None
        response, replayed_about = idempotent(
            integration_pk=self.integration_pk(request),
            key=key,
            digest=request_hash(request.method or "", request.path, body),
            carry_out=lambda: _answered(request, carry_out),
            about=lambda: About(
                getattr(request._request, "audit_organization_id", ""),
                getattr(request._request, "audit_server_id", ""),
            ),
        )
        if replayed_about is not None and replayed_about.organization_id:
            about(request, replayed_about.organization_id, replayed_about.server_id)
        return response


def _answered(request: Request, carry_out: Callable[[], Response]) -> Response:
    """The answer, refusals included, as a response that can be stored and replayed."""
    try:
        return carry_out()
    except (APIException, DomainError) as refused:
        return error_response(as_api_error(refused), request._request)


def exact_param(request: Request, name: str) -> str | None:
    """A filter matched exactly: given (even empty), it filters; an empty one matches nothing."""
    value = request.query_params.get(name)
    if value is not None and not value.isprintable():
        raise invalid_request("The filters are not valid.", {name: [UNPRINTABLE]})
    return value


def about(request: Request, organization_id: str, server_id: str = "") -> None:
    """Name the customer (and server) the call was about: its row goes into that customer's
    audit trail too."""
    request._request.audit_organization_id = organization_id  # type: ignore[attr-defined]
    if server_id:
        request._request.audit_server_id = server_id  # type: ignore[attr-defined]


def body_of(request: Request) -> dict[str, Any]:
    data = request.data
    return data if isinstance(data, dict) else {}
