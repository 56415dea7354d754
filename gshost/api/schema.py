"""OpenAPI description of the bearer key authentication (loaded by accounts' AppConfig)."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerKeyScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.BearerKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "gsk_<key id>_<secret> (56 characters)",
            "description": "An API key created in the panel (Account -> API Keys).",
        }
