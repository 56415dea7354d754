"""django-q2's admin pages, for superusers only.

Its schedule form takes free text for the function to call and its arguments, and the worker
runs whatever it names; its task pages show (and can resubmit) the same. Whoever can add a
schedule can run code on the worker, so no model permission is enough: only a superuser, who
can do anything anyway, reaches these pages.
"""

from typing import Any

import django_q.admin  # noqa: F401  (registers the stock admins, replaced below)
from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest
from django_q.models import Failure, OrmQ, Schedule, Success


def _superuser(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_active and user.is_superuser)


class SuperuserOnly:
    """Every admin permission is the superuser flag."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _superuser(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return _superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)


def _superusers_only(model: type[Model]) -> None:
    if not admin.site.is_registered(model):
        return
    stock = type(admin.site.get_model_admin(model))
    admin.site.unregister(model)
    admin.site.register(model, type(f"SuperuserOnly{stock.__name__}", (SuperuserOnly, stock), {}))


for _model in (Schedule, Success, Failure, OrmQ):
    _superusers_only(_model)
