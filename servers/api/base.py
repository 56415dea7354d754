"""What every route under /servers/{server_id}/ shares.

Order of checks: the key's scope (the permission class, before any lookup),
then the server (404 server_not_found, the same for foreign, restricted and absent), then the
capability of the action (501 not_supported, 403 feature_not_enabled), then the body, and
last the server's state (409 invalid_state, raised by the services).
"""

from typing import Any

from django.db.models import QuerySet
from rest_framework import serializers, viewsets
from rest_framework.response import Response

from accounts.authentication import calling_key
from audit.actors import Actor
from gshost.api.pagination import NewestFirstCursorPagination
from gshost.api.schema import ERROR_CODES
from servers.game.capabilities import Capability, capability_require
from servers.models import Server
from servers.selectors import server_get_for_key

# The routes that reach the server's node: 503 node_unavailable while it cannot be reached.
NODE_UNAVAILABLE = {ERROR_CODES: {503: ["node_unavailable"]}}


class ServerRouteViewSet(viewsets.ViewSet):
    capability_of_action: dict[str, Capability] = {}
    ordering_field = "created_at"

    def server(self) -> Server:
        server = server_get_for_key(calling_key(self.request), self.kwargs["server_id"])
        capability = self.capability_of_action.get(self.action or "")
        if capability is not None:
            capability_require(server, capability)
        return server

    def actor(self) -> Actor:
        return Actor.api(calling_key(self.request))

    def paginated(
        self,
        queryset: QuerySet[Any],
        serializer_class: type[serializers.BaseSerializer[Any]],
        ordering_field: str = "created_at",
    ) -> Response:
        self.ordering_field = ordering_field
        paginator = NewestFirstCursorPagination()
        page = paginator.paginate_queryset(queryset, self.request, view=self)
        return paginator.get_paginated_response(serializer_class(page, many=True).data)
