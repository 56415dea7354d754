"""Scope checks. Every public view must say which scope each action needs; none is refused."""

from typing import Any, Final

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from accounts.key_records import KeyRecord
from gshost.api.errors import ApiError, ErrorCode


class _NoScopeRequired:
    def __repr__(self) -> str:
        return "NO_SCOPE_REQUIRED"


NO_SCOPE_REQUIRED: Final = _NoScopeRequired()


def required_scope(view: Any, request: Request) -> str | _NoScopeRequired | None:
    """The scope the view declares for this action (viewsets) or method (plain views)."""
    declared: dict[str, Any] = getattr(view, "scopes", {})
    action = getattr(view, "action", None)
    if action is not None and action in declared:
        return declared[action]
    return declared.get(request.method or "")


def insufficient_scope(scope: str, message: str | None = None, **extra: Any) -> ApiError:
    message = message or f"This key lacks the scope {scope}."
    return ApiError(403, ErrorCode.INSUFFICIENT_SCOPE, message, required_scope=scope, **extra)


def require_scope(key: KeyRecord, scope: str) -> None:
    if scope not in key.granted_scopes:
        raise insufficient_scope(scope)


class HasRequiredScope(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        key = request.auth
        if not isinstance(key, KeyRecord):
            return False  # authentication always runs first; this is a safety net
        scope = required_scope(view, request)
        if scope is NO_SCOPE_REQUIRED:
            return True
        if not isinstance(scope, str):
            raise ApiError(405, ErrorCode.METHOD_NOT_ALLOWED, "Method not allowed.")
        require_scope(key, scope)
        return True
