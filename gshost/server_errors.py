"""Django's handler for errors no view handled (raised in a middleware, or on a panel page).

A database outage is not a bug: the request's transaction was rolled back, and the caller may
retry. It answers 503 with Retry-After (the API's error envelope under the API prefix), so a
restarted pooler or a failed-over database costs callers a retry, not a 500.
"""

import logging
import sys

from django.http import HttpRequest, HttpResponse
from django.views import defaults

from gshost.api.errors import ApiError, ErrorCode, database_unavailable, is_database_outage
from gshost.api.middleware import envelope, is_public_api

logger = logging.getLogger(__name__)


def server_error(request: HttpRequest) -> HttpResponse:
    exception = sys.exception()
    if exception is not None and is_database_outage(exception):
        logger.warning("Database unreachable in %s %s: %s", request.method, request.path, exception)
        error = database_unavailable()
        if is_public_api(request):
            return envelope(request, error)
        response = HttpResponse(
            "The service cannot reach its database just now. Retry in a few seconds.\n",
            status=503,
            content_type="text/plain",
        )
        response["Retry-After"] = error.headers["Retry-After"]
        return response
    if is_public_api(request):
        return envelope(request, ApiError(500, ErrorCode.INTERNAL_ERROR))
    return defaults.server_error(request)
