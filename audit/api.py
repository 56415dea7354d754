import json
import re
from typing import Any

from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.authentication import calling_key
from accounts.scopes import Scope
from audit.models import ActorType, AuditRecord
from audit.selectors import AuditFilters, audit_list
from gshost.api.errors import invalid_request
from gshost.api.fields import DATETIME_RULE, TimestampField, parse_usable_datetime
from gshost.api.query import choice_param, text_param
from gshost.ids import format_timestamp

_STATUS_CODE = re.compile(r"[0-9]{3}")  # ASCII only: str.isdigit() also passes "²⁰⁰"


def audit_record_json(record: AuditRecord) -> dict[str, Any]:
    actor: dict[str, str]
    if record.actor_type == ActorType.API_KEY:
        actor = {"type": "api_key", "key_id": record.actor_key_id}
    elif record.actor_type == ActorType.INTEGRATION:  # a billing system's integration key
        actor = {"type": "integration", "key_id": record.actor_key_id}
    elif record.actor_type == ActorType.SYSTEM:  # the platform, acting on this key
        actor = {"type": "system", "key_id": record.actor_key_id}
    else:
        actor = {"type": "user", "email": record.actor_email}
    return {
        "id": record.id,
        "occurred_at": format_timestamp(record.occurred_at),
        "source": record.source,
        "actor": actor,
        "method": record.method,
        "path": record.path,
        "action": record.action,
        "status_code": record.status_code,
        "error_code": record.error_code or None,
        "server_id": record.server_id or None,
        "ip": record.ip,
        "user_agent": record.user_agent,
        "request_id": record.request_id or None,
        "url": record.url or None,
        "details": json.loads(record.details) if record.details else None,
    }


def parse_filters(params: Any) -> AuditFilters:
    errors: dict[str, list[str]] = {}
    status_code = text_param(params, "status_code", errors)
    if status_code is not None and not _STATUS_CODE.fullmatch(status_code):
        errors["status_code"] = ["Must be an HTTP status code such as 403."]
    outcome = choice_param(params, "outcome", ["rejected"], errors)
    since_raw = params.get("since")
    # An unencoded "+01:00" arrives as " 01:00": take the space for the plus it was.
    since = parse_usable_datetime(since_raw.replace(" ", "+")) if since_raw else None
    if since_raw and since is None:
        errors["since"] = [DATETIME_RULE]
    key_id = text_param(params, "key_id", errors)
    server_id = text_param(params, "server_id", errors)
    if errors:
        raise invalid_request("The filters are not valid.", errors)
    return AuditFilters(
        key_id=key_id,
        status_code=int(status_code) if status_code else None,
        rejected_only=outcome == "rejected",
        server_id=server_id,
        since=since,
    )


class AuditRecordSerializer(serializers.Serializer[AuditRecord]):
    """The audit record's shape, for the OpenAPI schema (views use audit_record_json)."""

    id = serializers.CharField()
    occurred_at = TimestampField()
    source = serializers.ChoiceField(choices=["api", "panel", "system"])  # type: ignore[assignment]
    actor = serializers.DictField(
        help_text='{"type": "api_key", "key_id"}, {"type": "user", "email"}, '
        '{"type": "integration", "key_id"} for a billing system\'s integration key, or '
        '{"type": "system", "key_id"} when the platform acted on that key'
    )
    method = serializers.CharField()
    path = serializers.CharField()
    action = serializers.CharField()
    status_code = serializers.IntegerField(allow_null=True)
    error_code = serializers.CharField(allow_null=True)
    server_id = serializers.CharField(allow_null=True)
    ip = serializers.IPAddressField(allow_null=True)
    user_agent = serializers.CharField()
    request_id = serializers.CharField(allow_null=True)
    url = serializers.CharField(
        allow_null=True, help_text="key.leak_revoked: where the leaked key was found."
    )
    details = serializers.DictField(
        allow_null=True, help_text="files.*: the paths (and URL) the action was about."
    )


class AuditViewSet(viewsets.GenericViewSet[AuditRecord]):
    serializer_class = AuditRecordSerializer
    scopes = {"list": Scope.AUDIT_READ}
    ordering_field = "occurred_at"

    def list(self, request: Request) -> Response:
        filters = parse_filters(request.query_params)
        key = calling_key(request)
        records = audit_list(
            organization_id=key.organization_id,
            filters=filters,
            server_restrictions=key.server_restrictions,
        )
        page = self.paginate_queryset(records) or []
        return self.get_paginated_response([audit_record_json(r) for r in page])
