"""/nodes: where servers can go, and how much room each node has left."""

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from application.api.base import ApplicationView
from application.api.serializers import NodeSerializer
from application.scopes import IntegrationScope
from application.selectors import node_json
from servers.fleet.placement import load_of, nodes_with_usage


class NodesView(ApplicationView):
    scopes = {"GET": IntegrationScope.NODES_READ}

    @extend_schema(responses=NodeSerializer(many=True))
    def get(self, request: Request) -> Response:
        """The nodes, newest first, a page at a time (`?limit=`, `?cursor=`)."""
        return self.page(request, nodes_with_usage(), lambda node: node_json(load_of(node)))
