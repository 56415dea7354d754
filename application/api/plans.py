"""/plans: what a billing system sells (limits, backups kept, placement tags)."""

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from application.api.base import ApplicationView
from application.api.serializers import (
    PlanChangeSerializer,
    PlanCreateSerializer,
    PlanSerializer,
    limits_from,
)
from application.models import Plan
from application.plans import PlanInput, plan_create, plan_delete, plan_update
from application.scopes import IntegrationScope
from application.selectors import plan_get, plan_list
from gshost.api.schema import ERROR_CODES

READ, WRITE = IntegrationScope.PLANS_READ, IntegrationScope.PLANS_WRITE


def plan_json(plan: Plan) -> dict[str, object]:
    return dict(PlanSerializer(plan).data)


class PlansView(ApplicationView):
    scopes = {"GET": READ, "POST": WRITE}

    @extend_schema(responses=PlanSerializer(many=True))
    def get(self, request: Request) -> Response:
        return self.page(request, plan_list(), plan_json)

    @extend_schema(
        request=PlanCreateSerializer,
        responses={201: PlanSerializer},
        extensions={ERROR_CODES: {422: ["idempotency_key_reused"]}},
    )
    def post(self, request: Request) -> Response:
        return self.write(request, lambda: self._create(request))

    def _create(self, request: Request) -> Response:
        given = PlanCreateSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        plan = plan_create(
            data=PlanInput(
                name=data["name"],
                limits=limits_from(data),
                backups_limit=data["backups_limit"],
                tags=data["tags"],
            )
        )
        return Response(plan_json(plan), status=201)


class PlanView(ApplicationView):
    scopes = {"GET": READ, "PATCH": WRITE, "DELETE": WRITE}

    @extend_schema(responses=PlanSerializer)
    def get(self, request: Request, plan_id: str) -> Response:
        return Response(plan_json(plan_get(plan_id)))

    @extend_schema(
        request=PlanChangeSerializer,
        responses=PlanSerializer,
        extensions={ERROR_CODES: {422: ["idempotency_key_reused"]}},
    )
    def patch(self, request: Request, plan_id: str) -> Response:
        return self.write(request, lambda: self._change(request, plan_id))

    def _change(self, request: Request, plan_id: str) -> Response:
        plan = plan_get(plan_id)
        given = PlanChangeSerializer(data=request.data, partial=True)
        given.is_valid(raise_exception=True)
        return Response(plan_json(plan_update(plan=plan, changes=dict(given.validated_data))))

    @extend_schema(
        responses={204: None},
        extensions={ERROR_CODES: {409: ["plan_in_use"], 422: ["idempotency_key_reused"]}},
    )
    def delete(self, request: Request, plan_id: str) -> Response:
        return self.write(request, lambda: self._delete(request, plan_id))

    def _delete(self, request: Request, plan_id: str) -> Response:
        plan_delete(plan=plan_get(plan_id))
        return Response(status=204)
