"""Public account routes: the calling key's record, the organization's keys, self-revocation,
and the report of a leaked key (open to anyone)."""

from typing import Any

from django.conf import settings
from django.core.validators import ProhibitNullCharactersValidator
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_variables
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import calling_key
from accounts.key_records import KeyRecord, record_from_key
from accounts.leaks import MAX_URL_LENGTH, leak_context, leaked_token_handle
from accounts.models import ApiKey, LeakSource
from accounts.permissions import NO_SCOPE_REQUIRED
from accounts.scopes import Scope
from accounts.selectors import api_key_list_live
from accounts.services import api_key_revoke_own
from accounts.usage import last_use
from audit.actors import Actor
from gshost.api import rate_limits
from gshost.api.client_ip import client_ip
from gshost.api.errors import rate_limited
from gshost.api.fields import StrictCharField, TimestampField
from gshost.api.input import parse_input
from gshost.api.schema import ERROR_CODES
from gshost.ids import format_timestamp


def key_record_json(record: KeyRecord) -> dict[str, Any]:
    last_used_at, last_used_ip = last_use(record)
    return {
        **record.public_fields,
        "status": record.status_at(timezone.now()).value,
        "last_used_at": format_timestamp(last_used_at),
        "last_used_ip": last_used_ip,
    }


class KeyRecordSerializer(serializers.Serializer[ApiKey]):
    """The key record's shape, for the OpenAPI schema (views build it with key_record_json)."""

    id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    prefix = serializers.CharField()
    status = serializers.ChoiceField(choices=["active", "expired", "revoked"])
    scopes = serializers.ListField(child=serializers.CharField())
    unrecognized_scopes = serializers.ListField(child=serializers.CharField())
    server_restrictions = serializers.ListField(child=serializers.CharField())
    allowed_ips = serializers.ListField(child=serializers.CharField())
    expires_at = TimestampField(allow_null=True)
    created_at = TimestampField()
    created_by = serializers.EmailField(allow_null=True)
    last_used_at = TimestampField(allow_null=True)
    last_used_ip = serializers.IPAddressField(allow_null=True)
    replaced_by = serializers.CharField(allow_null=True)
    revoked_at = TimestampField(allow_null=True)


class KeyViewSet(viewsets.GenericViewSet[ApiKey]):
    serializer_class = KeyRecordSerializer
    scopes = {
        "current": NO_SCOPE_REQUIRED,
        "list": Scope.KEYS_READ,
        "destroy": Scope.KEYS_REVOKE,
    }
    lookup_url_kwarg = "key_id"
    cursor_tiebreak = "key_id"  # the page cursor's id: text, unique (the primary key is a number)

    def current(self, request: Request) -> Response:
        return Response(key_record_json(calling_key(request)))

    def list(self, request: Request) -> Response:
        keys = self.paginate_queryset(api_key_list_live(calling_key(request).organization_id)) or []
        return self.get_paginated_response([key_record_json(record_from_key(k)) for k in keys])

    @extend_schema(responses={200: KeyRecordSerializer})
    def destroy(self, request: Request, key_id: str) -> Response:
        caller = calling_key(request)
        key = api_key_revoke_own(caller=caller, key_id=key_id, actor=Actor.api(caller))
        return Response(key_record_json(record_from_key(key)))


class ReportedText(StrictCharField):
    """Any JSON string, as found: a NUL or other odd character is no reason to ignore a report
    (the token is only compared, the URL is cleaned before it is kept)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_blank=True, trim_whitespace=True, **kwargs)
        self.validators = [
            v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)
        ]


class LeakReportInput(serializers.Serializer[Any]):
    token = ReportedText(help_text="The key you found, as you found it.")
    url = ReportedText(
        required=False,
        default="",
        help_text=f"Where you found it (at most {MAX_URL_LENGTH} characters are kept).",
    )


class LeakReportReceipt(serializers.Serializer[Any]):
    received = serializers.BooleanField()


@method_decorator(sensitive_variables(), name="post")
class LeakReportView(APIView):
    """Anyone who finds a key may report it. The answer is the same whatever the token, so it
    tells nothing about our keys; a token that is an active key of ours is revoked at once."""

    # Open to anyone: the reporter holds no key of ours (or only the leaked one).
    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []

    @extend_schema(
        request=LeakReportInput,
        responses={202: LeakReportReceipt},
        auth=[],
        extensions={ERROR_CODES: {429: ["rate_limited"]}},
    )
    def post(self, request: Request) -> Response:
        limit = rate_limits.parse_rate(settings.LEAK_REPORT_RATE)
        state = rate_limits.hit(f"leakreport:{client_ip(request._request)}", limit)
        request._request.rate_limit_state = state  # type: ignore[attr-defined]
        if state.exceeded:
            raise rate_limited(state.retry_after)
        report = parse_input(request, LeakReportInput)
        leaked_token_handle(
            token=report["token"],
            source=LeakSource.REPORT,
            context=leak_context(request._request, report["url"]),
        )
        return Response({"received": True}, status=202)
