"""/customers: organizations and their owners, with exact lookups, and owners' login links."""

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from application.api.base import ApplicationView, about, body_of, exact_param
from application.api.serializers import (
    CustomerChangeSerializer,
    CustomerCreateSerializer,
    CustomerSerializer,
    LoginLinkSerializer,
    customer_json,
)
from application.customers import CustomerInput, customer_create, customer_delete, customer_update
from application.errors import CustomerNotFound
from application.idempotency import request_hash
from application.links import owner_link_create
from application.models import LinkPurpose
from application.scopes import IntegrationScope
from application.selectors import customer_get, customer_list
from gshost.api.schema import ERROR_CODES
from gshost.ids import format_timestamp

READ, WRITE = IntegrationScope.CUSTOMERS_READ, IntegrationScope.CUSTOMERS_WRITE


class CustomersView(ApplicationView):
    scopes = {"GET": READ, "POST": WRITE}

    @extend_schema(
        parameters=[
            OpenApiParameter("external_id", str, description="Exact, among this key's customers."),
            OpenApiParameter("email", str, description="The owner's, exact, case-insensitive."),
        ],
        responses=CustomerSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        rows = customer_list(
            integration_pk=self.integration_pk(request),
            external_id=exact_param(request, "external_id"),
            email=exact_param(request, "email"),
        )
        return self.page(request, rows, customer_json)

    @extend_schema(
        request=CustomerCreateSerializer,
        responses={201: CustomerSerializer, 200: CustomerSerializer},
        extensions={ERROR_CODES: {409: ["external_id_conflict"], 422: ["idempotency_key_reused"]}},
    )
    def post(self, request: Request) -> Response:
        return self.write(request, lambda: self._create(request))

    def _create(self, request: Request) -> Response:
        given = CustomerCreateSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        organization, created = customer_create(
            integration_pk=self.integration_pk(request),
            data=CustomerInput(
                external_id=data["external_id"],
                name=data["name"],
                owner_email=data["owner"]["email"],
                owner_name=data["owner"]["name"],
                request_hash=request_hash("POST", "customers", body_of(request)),
            ),
        )
        about(request, organization.id)
        return Response(
            customer_json(customer_get(organization.id)), status=201 if created else 200
        )


class CustomerView(ApplicationView):
    scopes = {"GET": READ, "PATCH": WRITE, "DELETE": WRITE}

    @extend_schema(responses=CustomerSerializer)
    def get(self, request: Request, customer_id: str) -> Response:
        organization = customer_get(customer_id)
        about(request, organization.id)
        return Response(customer_json(organization))

    @extend_schema(
        request=CustomerChangeSerializer,
        responses=CustomerSerializer,
        extensions={ERROR_CODES: {409: ["external_id_conflict"], 422: ["idempotency_key_reused"]}},
    )
    def patch(self, request: Request, customer_id: str) -> Response:
        return self.write(request, lambda: self._change(request, customer_id))

    def _change(self, request: Request, customer_id: str) -> Response:
        organization = customer_get(customer_id)
        about(request, organization.id)
        given = CustomerChangeSerializer(data=request.data, partial=True)
        given.is_valid(raise_exception=True)
        data: dict[str, Any] = dict(given.validated_data)
        owner = data.pop("owner", None)
        if owner is not None and "name" in owner:
            data["owner_name"] = owner["name"]
        customer_update(
            integration_pk=self.integration_pk(request), organization=organization, changes=data
        )
        return Response(customer_json(customer_get(customer_id)))

    @extend_schema(
        responses={204: None},
        extensions={ERROR_CODES: {409: ["customer_has_servers"], 422: ["idempotency_key_reused"]}},
    )
    def delete(self, request: Request, customer_id: str) -> Response:
        return self.write(request, lambda: self._delete(request, customer_id))

    def _delete(self, request: Request, customer_id: str) -> Response:
        organization = customer_get(customer_id)
        about(request, organization.id)
        customer_delete(organization=organization)
        return Response(status=204)


class LoginLinkView(ApplicationView):
    scopes = {"POST": WRITE}

    @extend_schema(request=None, responses=LoginLinkSerializer)
    def post(self, request: Request, customer_id: str) -> Response:
        return self.write(request, lambda: self._link(request, customer_id))

    def _link(self, request: Request, customer_id: str) -> Response:
        organization = customer_get(customer_id)
        about(request, organization.id)
        owner = next((m for m in organization.memberships.all() if m.role == "owner"), None)
        if owner is None:
            raise CustomerNotFound("The customer has no owner to sign in.")
        link = owner_link_create(
            user=owner.user, organization=organization, purpose=LinkPurpose.SIGN_IN
        )
        return Response({"url": link.url, "expires_at": format_timestamp(link.expires_at)})
