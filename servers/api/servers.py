from typing import Any

from rest_framework import mixins, serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.authentication import calling_key
from accounts.scopes import Scope
from gshost.api.fields import TimestampField
from servers.models import Server
from servers.selectors import server_get_for_key, server_list_for_key


class PlanSerializer(serializers.Serializer[Any]):
    memory_mb = serializers.IntegerField(help_text="Memory limit, MB.")
    disk_mb = serializers.IntegerField(help_text="Disk limit, MB.")
    cpu_percent = serializers.IntegerField(help_text="CPU limit, percent of one core.")
    processes = serializers.IntegerField(help_text="Processes and threads at most.")


class ServerSerializer(serializers.ModelSerializer[Server]):
    node = serializers.CharField(source="node.name", help_text="The node the server runs on.")
    plan = PlanSerializer(source="*", help_text="What the server may use on its node.")
    restart_on_crash = serializers.BooleanField(
        help_text="A crash while running is followed by a start 5 s later (not a crash loop)."
    )
    suspended = serializers.BooleanField(
        read_only=True,
        help_text="Suspended by the host: every action on it answers 409 server_suspended.",
    )
    created_at = TimestampField()

    class Meta:
        model = Server
        fields = [
            "id", "name", "game", "state", "address", "node", "plan", "restart_on_crash",
            "suspended", "created_at",
        ]  # fmt: skip


class ServerViewSet(mixins.ListModelMixin, viewsets.GenericViewSet[Server]):
    serializer_class = ServerSerializer
    scopes = {"list": Scope.SERVERS_READ, "retrieve": Scope.SERVERS_READ}
    lookup_url_kwarg = "server_id"

    def get_queryset(self):  # type: ignore[no-untyped-def]
        return server_list_for_key(calling_key(self.request))

    def retrieve(self, request: Request, server_id: str) -> Response:
        server = server_get_for_key(calling_key(request), server_id)
        return Response(ServerSerializer(server).data)
