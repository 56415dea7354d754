from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.permissions import NO_SCOPE_REQUIRED
from gshost.api.errors import not_found


class UnknownRouteView(APIView):
    """Any other path under the API prefix: authenticated (and so audited) like the rest."""

    scopes = {m.upper(): NO_SCOPE_REQUIRED for m in APIView.http_method_names}
    schema = None

    def _not_found(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise not_found("No such route.")

    get = post = put = patch = delete = head = options = _not_found


class HealthView(APIView):
    """Liveness for load balancers; also the benchmark's bare-view baseline."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    schema = None

    def get(self, request: Request) -> Response:
        return Response({"status": "ok"})
