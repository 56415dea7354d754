"""The Application API's schema holds its own routes only (the Customer API has its own), with
the integration key as its bearer scheme."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from gshost.api.schema import postprocess_schema, routes_under

PREFIX = "/api/application/v1"


def application_routes_only(endpoints: list[Any], **kwargs: Any) -> list[Any]:
    return routes_under(PREFIX, endpoints)


class IntegrationKeyScheme(OpenApiAuthenticationExtension):
    target_class = "application.authentication.IntegrationKeyAuthentication"
    name = "IntegrationKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "gsi_<key id>_<secret> (56 characters)",
            "description": "An integration key minted by staff (Django admin, or "
            "`manage.py createintegrationkey`).",
        }


def postprocess(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """The Customer API's errors and pages for every operation, less what only servers'
    capabilities answer there (501 not_supported)."""
    result = postprocess_schema(result, **kwargs)
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if isinstance(operation, dict):
                operation.get("responses", {}).pop("501", None)
    return result
