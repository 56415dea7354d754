"""/servers: placed by the same rule as `createserver`, unique per external id, idempotent;
suspended, reinstalled and deleted as desired state."""

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from application.api.base import ApplicationView, about, body_of, exact_param
from application.api.serializers import (
    ServerChangeSerializer,
    ServerCreateSerializer,
    ServerSerializer,
    limits_from,
    server_json,
)
from application.authentication import calling_integration
from application.idempotency import request_hash
from application.plans import limits_of
from application.scopes import IntegrationScope
from application.selectors import customer_get, plan_get, server_get, server_list
from application.server_actions import ServerAction, sold_server_act
from application.sold_servers import (
    ServerChanges,
    ServerOrder,
    sold_server_change,
    sold_server_create,
)
from audit.actors import Actor
from gshost.api.schema import ERROR_CODES

READ, WRITE = IntegrationScope.SERVERS_READ, IntegrationScope.SERVERS_WRITE
REUSED = {422: ["idempotency_key_reused"]}


def _actor(request: Request) -> Actor:
    return Actor.integration(calling_integration(request))


class ServersView(ApplicationView):
    scopes = {"GET": READ, "POST": WRITE}

    @extend_schema(
        parameters=[OpenApiParameter("external_id", str, description="Exact, this key's.")],
        responses=ServerSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        rows = server_list(
            integration_pk=self.integration_pk(request),
            external_id=exact_param(request, "external_id"),
        )
        return self.page(request, rows, server_json)

    @extend_schema(
        request=ServerCreateSerializer,
        responses={201: ServerSerializer, 200: ServerSerializer},
        extensions={ERROR_CODES: {409: ["no_capacity", "external_id_conflict"], **REUSED}},
    )
    def post(self, request: Request) -> Response:
        return self.write(request, lambda: self._create(request))

    def _create(self, request: Request) -> Response:
        given = ServerCreateSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        customer = customer_get(data["customer"])
        about(request, customer.id)
        plan = plan_get(data["plan"]) if "plan" in data else None
        order = ServerOrder(
            external_id=data["external_id"],
            customer=customer,
            name=data["name"],
            game=data["game"],
            plan=plan,
            limits=limits_of(plan) if plan is not None else limits_from(data["limits"]),
            tags=data["tags"],
            settings=data["settings"],
            start=data["start"],
            request_hash=request_hash("POST", "servers", body_of(request)),
        )
        server, created = sold_server_create(
            integration_pk=self.integration_pk(request), order=order, actor=_actor(request)
        )
        about(request, customer.id, server.id)
        return Response(server_json(server_get(server.id)), status=201 if created else 200)


class ServerView(ApplicationView):
    scopes = {"GET": READ, "PATCH": WRITE, "DELETE": WRITE}

    @extend_schema(responses=ServerSerializer)
    def get(self, request: Request, server_id: str) -> Response:
        server = server_get(server_id)
        about(request, server.organization_id, server.id)
        return Response(server_json(server))

    @extend_schema(
        request=ServerChangeSerializer,
        responses=ServerSerializer,
        extensions={ERROR_CODES: {409: ["no_capacity", "external_id_conflict"], **REUSED}},
    )
    def patch(self, request: Request, server_id: str) -> Response:
        return self.write(request, lambda: self._change(request, server_id))

    def _change(self, request: Request, server_id: str) -> Response:
        server = server_get(server_id)
        about(request, server.organization_id, server.id)
        given = ServerChangeSerializer(data=request.data, partial=True)
        given.is_valid(raise_exception=True)
        data: dict[str, Any] = given.validated_data
        changes = ServerChanges(
            name=data.get("name"),
            plan=plan_get(data["plan"]) if "plan" in data else None,
            limits=limits_from(data["limits"]) if "limits" in data else None,
            external_id=data.get("external_id"),
            external_id_given="external_id" in data,
        )
        sold_server_change(
            integration_pk=self.integration_pk(request),
            server=server,
            changes=changes,
            actor=_actor(request),
        )
        return Response(server_json(server_get(server_id)))

    @extend_schema(responses={204: None}, extensions={ERROR_CODES: REUSED})
    def delete(self, request: Request, server_id: str) -> Response:
        return self.write(request, lambda: _act(request, server_id, ServerAction.DELETE))


def _act(request: Request, server_id: str, action: ServerAction) -> Response:
    server = server_get(server_id)
    about(request, server.organization_id, server.id)
    sold_server_act(server=server, action=action, actor=_actor(request))
    if action == ServerAction.DELETE:
        return Response(status=204)
    return Response(server_json(server_get(server_id)))


class ServerActionView(ApplicationView):
    scopes = {"POST": WRITE}
    action_name: ServerAction = ServerAction.SUSPEND

    @extend_schema(request=None, responses=ServerSerializer, extensions={ERROR_CODES: REUSED})
    def post(self, request: Request, server_id: str) -> Response:
        return self.write(request, lambda: _act(request, server_id, self.action_name))
