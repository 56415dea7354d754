"""The errors server actions refuse with. They are the API's own errors (the panel shows
their message), so a service can refuse once and every caller answers the same way."""

from gshost.api.errors import ApiError, ErrorCode


def invalid_state(state: str, message: str | None = None) -> ApiError:
    message = message or f"Not allowed while the server is {state}."
    return ApiError(409, ErrorCode.INVALID_STATE, message, state=state)


def not_supported(capability: str) -> ApiError:
    message = f"This server's game does not support {capability}. See its capabilities."
    return ApiError(501, ErrorCode.NOT_SUPPORTED, message, capability=capability)


def feature_not_enabled(capability: str) -> ApiError:
    message = f"This server's plan does not enable {capability}. See its capabilities."
    return ApiError(403, ErrorCode.FEATURE_NOT_ENABLED, message, capability=capability)
