"""What gets recorded: API calls made with an organization's key, and panel actions."""

import json

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from accounts.key_records import KeyRecord
from audit.buffer import audit_buffer
from audit.failed_auth import should_record_failure
from audit.models import ActorType, Source
from gshost.api.client_ip import client_ip


def _action(request: HttpRequest) -> str:
    noted = getattr(request, "audit_action", None)
    if isinstance(noted, str):
        return noted
    match = request.resolver_match
    if match is None or not match.url_name:
        return "unknown"
    return match.url_name


def _storable(text: str) -> str:
    """PostgreSQL text cannot hold NUL: a caller could otherwise make its row, and every row
    buffered with it, unwritable. It is kept visible as U+FFFD."""
    return text.replace("\x00", "\ufffd")


def record_api_call(request: HttpRequest, response: HttpResponse) -> None:
    """Record the call if its token named a key of an organization, whatever the outcome."""
    key: KeyRecord | None = getattr(request, "audit_key", None)
    if key is None:
        return
    authenticated = getattr(request, "api_key_record", None) is not None
    if not authenticated and not should_record_failure(key):
        return  # past the limit for this key and minute: counted in one summary row
    match = request.resolver_match
    server_id = str(match.kwargs.get("server_id", "")) if match is not None else ""
    audit_buffer.add(
        {
            "organization_id": key.organization_id,
            "occurred_at": timezone.now(),
            "source": Source.API,
            "actor_type": ActorType.API_KEY,
            "actor_key_id": key.key_id,
            "method": request.method or "",
            "path": _storable(request.path[:500]),
            "action": _action(request),
            "status_code": response.status_code,
            "error_code": getattr(request, "api_error_code", ""),
            "server_id": _storable(server_id[:40]),
            "ip": client_ip(request),
            "user_agent": _storable(request.META.get("HTTP_USER_AGENT", "")[:500]),
            "request_id": getattr(request, "request_id", ""),
            "details": _details(request),
        }
    )


def record_integration_call(
    request: HttpRequest, response: HttpResponse, *, organization_id: str, key_id: str
) -> None:
    """An Application API call about this organization, in its audit trail: the actor is the
    billing system's integration key."""
    match = request.resolver_match
    server_id = str(match.kwargs.get("server_id", "")) if match is not None else ""
    audit_buffer.add(
        {
            "organization_id": organization_id,
            "occurred_at": timezone.now(),
            "source": Source.API,
            "actor_type": ActorType.INTEGRATION,
            "actor_key_id": key_id,
            "method": request.method or "",
            "path": _storable(request.path[:500]),
            "action": _action(request),
            "status_code": response.status_code,
            "error_code": getattr(request, "api_error_code", ""),
            "server_id": _storable(getattr(request, "audit_server_id", server_id)[:40]),
            "ip": client_ip(request),
            "user_agent": _storable(request.META.get("HTTP_USER_AGENT", "")[:500]),
            "request_id": getattr(request, "request_id", ""),
            "details": _details(request),
        }
    )


def _details(request: HttpRequest) -> str:
    """What the view noted of the call beyond its route (`note_audit_details`), as JSON."""
    details = getattr(request, "audit_details", None)
    return _storable(json.dumps(details, ensure_ascii=False)[:4000]) if details else ""
