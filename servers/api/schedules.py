"""GET /servers/{id}/schedules and POST /servers/{id}/schedules/{sch}/run (Run Now)."""

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.scopes import Scope
from servers.api.base import ServerRouteViewSet
from servers.api.serializers import ScheduleRunSerializer, ScheduleSerializer
from servers.game.capabilities import Capability
from servers.schedules import schedule_run_now
from servers.selectors import schedule_get_for_server, schedule_list_for_server


class ScheduleViewSet(ServerRouteViewSet):
    scopes = {"list": Scope.SCHEDULES_READ, "run": Scope.SCHEDULES_EXECUTE}
    capability_of_action = {"list": Capability.SCHEDULES, "run": Capability.SCHEDULES}

    @extend_schema(responses=ScheduleSerializer(many=True))
    def list(self, request: Request, server_id: str) -> Response:
        return self.paginated(schedule_list_for_server(self.server()), ScheduleSerializer)

    @extend_schema(request=None, responses={202: ScheduleRunSerializer})
    def run(self, request: Request, server_id: str, schedule_id: str) -> Response:
        schedule = schedule_get_for_server(self.server(), schedule_id)
        run = schedule_run_now(schedule=schedule, actor=self.actor())
        return Response(ScheduleRunSerializer(run).data, status=202)
