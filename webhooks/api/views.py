"""Public webhook routes: registration, test pings, delivery history and redelivery.

Thin views: parse with an input serializer, call one selector or service, render the record.
The services' refusals are domain errors: the API's exception handler answers them.
"""

from collections.abc import Mapping
from typing import Any

from django.http import QueryDict
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.authentication import calling_key
from accounts.models import Organization
from accounts.permissions import insufficient_scope, required_scope
from accounts.scopes import Scope
from audit.actors import Actor
from gshost.api.errors import ApiError, ErrorCode, invalid_request
from gshost.api.fields import StrictCharField, TimestampField, UsableDateTimeField
from gshost.api.input import parse_input
from gshost.api.query import choice_param, text_param
from gshost.api.schema import ERROR_CODES
from gshost.ids import format_timestamp
from webhooks.events import Event
from webhooks.models import Delivery, DeliveryAttempt, DeliveryStatus, Webhook
from webhooks.payloads import parse_body
from webhooks.selectors import (
    delivery_get_for_webhook,
    delivery_list_for_webhook,
    webhook_get_for_org,
    webhook_list_for_org,
)
from webhooks.services import (
    DEFAULT_GRACE_HOURS,
    MAX_DESCRIPTION_LENGTH,
    MAX_GRACE_HOURS,
    MAX_URL_LENGTH,
    deliveries_request_bulk_redelivery,
    delivery_request_redelivery,
    webhook_create,
    webhook_delete,
    webhook_roll_secret,
    webhook_send_test,
    webhook_update,
)
from webhooks.targets.transport import AttemptResult

EVENT_ALIAS = "event_types"  # the older name of `events`, still accepted by PATCH
MAX_EVENT_ENTRIES = 50
MAX_EVENT_NAME_LENGTH = 100
IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY_LENGTH = 200
EVENT_CHOICES = [(event.value, event.value) for event in Event]

# --- records ------------------------------------------------------------------------------------


@extend_schema_field({"type": "string", "nullable": True})
class BlankAsNullField(serializers.Field):
    """Stored as "" when there is none; the API says null."""

    def to_representation(self, value: str) -> str | None:
        return value or None


class WebhookOutput(serializers.Serializer[Webhook]):
    id = serializers.CharField()
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.CharField())
    description = serializers.CharField()
    status = serializers.CharField()
    created_at = TimestampField()
    updated_at = TimestampField()


class WebhookCreatedOutput(WebhookOutput):
    signing_secret = serializers.CharField(help_text="Shown this once; never retrievable later.")


class SecretRolledOutput(WebhookCreatedOutput):
    previous_secret_expires_at = TimestampField(
        allow_null=True, help_text="Until then the previous secret signs too; null: not at all."
    )


class AttemptOutput(serializers.Serializer[DeliveryAttempt]):
    number = serializers.IntegerField()
    trigger = serializers.CharField()
    started_at = TimestampField()
    duration_ms = serializers.IntegerField()
    status_code = serializers.IntegerField(allow_null=True)
    response_body = serializers.CharField()
    request_headers = serializers.DictField(child=serializers.CharField())
    response_headers = serializers.DictField(child=serializers.CharField())
    error = BlankAsNullField()


class DeliveryOutput(serializers.Serializer[Delivery]):
    id = serializers.CharField()
    webhook_id = serializers.CharField()
    event = serializers.CharField()
    server_id = BlankAsNullField()
    status = serializers.CharField()
    created_at = TimestampField()
    next_attempt_at = TimestampField(allow_null=True)
    payload = serializers.SerializerMethodField()
    attempts = AttemptOutput(many=True)  # in number order (the model's ordering)

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_payload(self, delivery: Delivery) -> Any:
        return parse_body(delivery.body)


class PingResultOutput(serializers.Serializer[AttemptResult]):
    success = serializers.BooleanField(source="succeeded")
    status_code = serializers.IntegerField(allow_null=True)
    duration_ms = serializers.IntegerField()
    response_body = serializers.CharField()
    error = serializers.CharField(allow_null=True)


class CountOutput(serializers.Serializer[Any]):
    count = serializers.IntegerField()


def webhook_json(webhook: Webhook) -> dict[str, Any]:
    return dict(WebhookOutput(webhook).data)


def delivery_json(delivery: Delivery) -> dict[str, Any]:
    return dict(DeliveryOutput(delivery).data)


# --- input --------------------------------------------------------------------------------------


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false only, not DRF's "yes", 1 or "on"."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


# The schema names the ten events; another name is `422 unknown_event` (naming it).
@extend_schema_field({"type": "string", "enum": [event.value for event in Event]})
class EventNameField(StrictCharField):
    pass


# What the schema can say of the URL rules (the rest, such as private addresses, are 422).
URL_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_URL_LENGTH,
    # What the URL rules say that a pattern can: https, a host (or [IPv6], two colons at least)
    # and a port of digits, no user name, no whitespace, backslash or control character. Whether
    # the host is a valid and public one only the rules can tell (422 invalid_webhook_url).
    "pattern": (
        r"^[Hh][Tt][Tt][Pp][Ss]://(?:\[[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*\]"
        r"|[^/?#@:\[\]\s\\\u0000-\u001f\u007f-\u009f]+)"
        r"(?::[0-9]{1,5})?(?:[/?#][^\s\\\u0000-\u001f\u007f-\u009f]*)?$"
    ),
    "description": "An https URL of a publicly reachable host (see the URL rules).",
}


@extend_schema_field(URL_SCHEMA)
class WebhookUrlField(StrictCharField):
    pass


def _events_field(**kwargs: Any) -> serializers.ListField:
    name = EventNameField(trim_whitespace=False, allow_blank=True, max_length=MAX_EVENT_NAME_LENGTH)
    return serializers.ListField(
        child=name, allow_empty=False, min_length=1, max_length=MAX_EVENT_ENTRIES, **kwargs
    )


class WebhookCreateInput(serializers.Serializer[Any]):
    # A blank or unsafe URL is a string: the URL rules judge it (422 invalid_webhook_url).
    url = WebhookUrlField(trim_whitespace=False, allow_blank=True, max_length=MAX_URL_LENGTH)
    events = _events_field()
    description = StrictCharField(
        trim_whitespace=False,
        required=False,
        allow_blank=True,
        max_length=MAX_DESCRIPTION_LENGTH,
        default="",
    )


class WebhookUpdateInput(serializers.Serializer[Any]):
    url = WebhookUrlField(
        trim_whitespace=False, required=False, allow_blank=True, max_length=MAX_URL_LENGTH
    )
    events = _events_field(required=False)
    event_types = _events_field(required=False, help_text="Deprecated alias of `events`.")
    description = StrictCharField(
        trim_whitespace=False, required=False, allow_blank=True, max_length=MAX_DESCRIPTION_LENGTH
    )

    def to_internal_value(self, data: Any) -> Any:
        """The alias is `events` under its old name: checked, and reported, as `events`."""
        if isinstance(data, Mapping) and EVENT_ALIAS in data:
            if "events" in data:
                message = f"Send `events` or its alias `{EVENT_ALIAS}`, not both."
                both = {"events": [message], EVENT_ALIAS: [message]}
                raise ApiError(422, ErrorCode.CONFLICTING_FIELDS, message, fields=both)
            data = {**data, "events": data[EVENT_ALIAS]}
            del data[EVENT_ALIAS]
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer only (DRF's IntegerField accepts "12", 12.0 and true)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return int(super().to_internal_value(data))


class SecretRollInput(serializers.Serializer[Any]):
    grace_hours = StrictIntegerField(
        required=False,
        default=DEFAULT_GRACE_HOURS,
        min_value=0,
        max_value=MAX_GRACE_HOURS,
        help_text="How long the previous secret keeps signing (0-168, default 24).",
    )


class BulkRedeliveryInput(serializers.Serializer[Any]):
    status = serializers.ChoiceField(
        choices=DeliveryStatus.choices, required=False, allow_null=True
    )
    event = serializers.ChoiceField(choices=EVENT_CHOICES, required=False, allow_null=True)
    since = UsableDateTimeField(required=False, allow_null=True)
    until = UsableDateTimeField(required=False, allow_null=True)
    dry_run = StrictBooleanField(required=False, default=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        since, until = attrs.get("since"), attrs.get("until")
        if since is not None and until is not None and since >= until:
            raise serializers.ValidationError({"until": ["Must be later than since."]})
        return attrs


def delivery_filters(params: QueryDict) -> dict[str, Any]:
    """`status`, `event`, `server_id` of the history's query string; empty means unfiltered.
    Every bad one is named in one `400 invalid_request`."""
    errors: dict[str, list[str]] = {}
    status_value = choice_param(params, "status", DeliveryStatus.values, errors)
    event_value = choice_param(params, "event", [name for name, _ in EVENT_CHOICES], errors)
    server_id = text_param(params, "server_id", errors)
    if errors:
        raise invalid_request("The filters are not valid.", errors)
    return {
        "status": DeliveryStatus(status_value) if status_value else None,
        "event": Event(event_value) if event_value else None,
        "server_id": server_id,
    }


def idempotency_key(request: Request) -> str | None:
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return None
    if not (0 < len(key) <= MAX_IDEMPOTENCY_KEY_LENGTH and key.isascii() and key.isprintable()):
        message = f"1 to {MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII characters."
        raise invalid_request(
            "The Idempotency-Key header is not valid.", {IDEMPOTENCY_HEADER: [message]}
        )
    return key


# --- views --------------------------------------------------------------------------------------

PAGE_PARAMETERS = [
    OpenApiParameter("limit", int, description="1-100, default 50."),
    OpenApiParameter("cursor", str, description="From the `next` or `previous` link."),
]
DELIVERY_FILTER_PARAMETERS = [
    OpenApiParameter("status", str, enum=list(DeliveryStatus.values)),
    OpenApiParameter("event", str, enum=[name for name, _ in EVENT_CHOICES]),
    OpenApiParameter("server_id", str),
]
IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_HEADER,
    str,
    location=OpenApiParameter.HEADER,
    description="A repeat with the same key answers the first count and queues nothing new.",
)


def _caller(request: Request) -> Actor:
    """The calling key as the actor: the request middleware audits the call."""
    return Actor.api(calling_key(request))


UNRESTRICTED_KEY_RULE = "unrestricted_key_required"


class _WebhookRoutes(viewsets.GenericViewSet[Any]):
    def _webhook(self, request: Request, webhook_id: str) -> Webhook:
        return webhook_get_for_org(calling_key(request).organization_id, webhook_id)

    def _delivery(self, request: Request, webhook_id: str, delivery_id: str) -> Delivery:
        return delivery_get_for_webhook(
            self._webhook(request, webhook_id),
            delivery_id,
            server_restrictions=calling_key(request).server_restrictions,
        )

    def _require_unrestricted_key(self, request: Request) -> None:
        """A webhook receives every server's events: changing one is for a key that may see
        every server (checked after the scope, before the webhook is looked up)."""
        if calling_key(request).server_restrictions:
            scope = required_scope(self, request)
            raise insufficient_scope(
                str(scope),
                "Webhooks receive every server's events: this needs a key without server "
                "restrictions.",
                rule=UNRESTRICTED_KEY_RULE,
            )


class WebhookViewSet(_WebhookRoutes):
    serializer_class = WebhookOutput
    scopes = {
        "list": Scope.WEBHOOKS_READ,
        "create": Scope.WEBHOOKS_WRITE,
        "retrieve": Scope.WEBHOOKS_READ,
        "partial_update": Scope.WEBHOOKS_MANAGE,
        "destroy": Scope.WEBHOOKS_WRITE,
        "test": Scope.WEBHOOKS_MANAGE,
        "roll_secret": Scope.WEBHOOKS_MANAGE,
    }

    @extend_schema(operation_id="webhooks_list", parameters=PAGE_PARAMETERS)
    def list(self, request: Request) -> Response:
        webhooks = webhook_list_for_org(calling_key(request).organization_id)
        page = self.paginate_queryset(webhooks) or []
        return self.get_paginated_response([webhook_json(webhook) for webhook in page])

    @extend_schema(
        operation_id="webhooks_create",
        request=WebhookCreateInput,
        responses={201: WebhookCreatedOutput},
        extensions={ERROR_CODES: {422: ["invalid_webhook_url", "unknown_event", "limit_reached"]}},
    )
    def create(self, request: Request) -> Response:
        self._require_unrestricted_key(request)
        data = parse_input(request, WebhookCreateInput)
        organization = Organization.objects.get(pk=calling_key(request).organization_id)
        webhook, secret = webhook_create(organization=organization, actor=_caller(request), **data)
        body = {**webhook_json(webhook), "signing_secret": secret}
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(operation_id="webhooks_retrieve")
    def retrieve(self, request: Request, webhook_id: str) -> Response:
        return Response(webhook_json(self._webhook(request, webhook_id)))

    @extend_schema(
        operation_id="webhooks_update",
        request=WebhookUpdateInput,
        extensions={
            ERROR_CODES: {422: ["conflicting_fields", "invalid_webhook_url", "unknown_event"]}
        },
    )
    def partial_update(self, request: Request, webhook_id: str) -> Response:
        self._require_unrestricted_key(request)
        webhook = self._webhook(request, webhook_id)
        data = parse_input(request, WebhookUpdateInput)
        return Response(
            webhook_json(webhook_update(webhook=webhook, actor=_caller(request), **data))
        )

    @extend_schema(operation_id="webhooks_delete", responses={204: None})
    def destroy(self, request: Request, webhook_id: str) -> Response:
        self._require_unrestricted_key(request)
        webhook_delete(webhook=self._webhook(request, webhook_id), actor=_caller(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(operation_id="webhooks_test", request=None, responses=PingResultOutput)
    def test(self, request: Request, webhook_id: str) -> Response:
        self._require_unrestricted_key(request)
        result = webhook_send_test(
            webhook=self._webhook(request, webhook_id), actor=_caller(request)
        )
        return Response(PingResultOutput(result).data)

    @extend_schema(
        operation_id="webhooks_secret_rotate", request=SecretRollInput, responses=SecretRolledOutput
    )
    def roll_secret(self, request: Request, webhook_id: str) -> Response:
        self._require_unrestricted_key(request)
        webhook = self._webhook(request, webhook_id)
        data = parse_input(request, SecretRollInput)
        webhook, secret = webhook_roll_secret(webhook=webhook, actor=_caller(request), **data)
        body = {
            **webhook_json(webhook),
            "signing_secret": secret,
            "previous_secret_expires_at": format_timestamp(webhook.previous_secret_expires_at),
        }
        return Response(body)


class DeliveryViewSet(_WebhookRoutes):
    serializer_class = DeliveryOutput
    scopes = {
        "list": Scope.WEBHOOKS_READ,
        "retrieve": Scope.WEBHOOKS_READ,
        "redeliver": Scope.WEBHOOKS_MANAGE,
        "bulk_redeliver": Scope.WEBHOOKS_MANAGE,
    }

    @extend_schema(
        operation_id="webhooks_deliveries_list",
        parameters=[*PAGE_PARAMETERS, *DELIVERY_FILTER_PARAMETERS],
        extensions={ERROR_CODES: {404: ["server_not_found"]}},
    )
    def list(self, request: Request, webhook_id: str) -> Response:
        webhook = self._webhook(request, webhook_id)
        filters = delivery_filters(request.query_params)
        restrictions = calling_key(request).server_restrictions
        deliveries = delivery_list_for_webhook(
            webhook, **filters, server_restrictions=restrictions
        ).prefetch_related("attempts")
        page = self.paginate_queryset(deliveries) or []
        return self.get_paginated_response([delivery_json(delivery) for delivery in page])

    @extend_schema(operation_id="webhooks_deliveries_retrieve")
    def retrieve(self, request: Request, webhook_id: str, delivery_id: str) -> Response:
        delivery = self._delivery(request, webhook_id, delivery_id)
        return Response(delivery_json(delivery))

    @extend_schema(
        operation_id="webhooks_deliveries_redeliver",
        request=None,
        responses={202: DeliveryOutput},
    )
    def redeliver(self, request: Request, webhook_id: str, delivery_id: str) -> Response:
        delivery = self._delivery(request, webhook_id, delivery_id)
        delivery = delivery_request_redelivery(delivery=delivery, actor=_caller(request))
        return Response(delivery_json(delivery), status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        operation_id="webhooks_deliveries_bulk_redeliver",
        request=BulkRedeliveryInput,
        responses={202: CountOutput},
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    def bulk_redeliver(self, request: Request, webhook_id: str) -> Response:
        webhook = self._webhook(request, webhook_id)
        data = parse_input(request, BulkRedeliveryInput)
        count = deliveries_request_bulk_redelivery(
            webhook=webhook,
            actor=_caller(request),
            status=DeliveryStatus(data["status"]) if data.get("status") else None,
            event=Event(data["event"]) if data.get("event") else None,
            since=data.get("since"),
            until=data.get("until"),
            dry_run=data["dry_run"],
            idempotency_key=idempotency_key(request),
            server_restrictions=calling_key(request).server_restrictions,
        )
        return Response({"count": count}, status=status.HTTP_202_ACCEPTED)
