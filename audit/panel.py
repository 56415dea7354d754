"""The panel's audit page: the organization's last 24 hours, newest first. Mounted at
/panel/audit/ by the project URLconf."""

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_http_methods

from accounts.models import Membership
from accounts.panel.access import member_with_scope
from accounts.scopes import Scope
from audit.selectors import AuditFilters, audit_list

PAGE_SIZE = 200
REJECTED = "rejected"


class AuditFilterForm(forms.Form):
    key_id = forms.CharField(required=False, max_length=8, label="Key id")
    status_code = forms.IntegerField(
        required=False, min_value=100, max_value=599, label="Status code"
    )
    outcome = forms.ChoiceField(
        required=False,
        choices=[("", "All outcomes"), (REJECTED, "Rejected only (4xx, 5xx)")],
        label="Outcome",
    )
    server_id = forms.CharField(required=False, max_length=40, label="Server id")

    def filters(self) -> AuditFilters:
        data = self.cleaned_data
        return AuditFilters(
            key_id=data["key_id"].strip() or None,
            status_code=data["status_code"],
            rejected_only=data["outcome"] == REJECTED,
            server_id=data["server_id"].strip() or None,
        )


@require_http_methods(["GET"])
@member_with_scope(Scope.AUDIT_READ)
def audit_page(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = AuditFilterForm(request.GET)
    if not form.is_valid():
        context = {"form": form, "records": [], "page_size": PAGE_SIZE}
        return render(request, "audit/list.html", context, status=400)
    records = list(
        audit_list(organization_id=membership.organization_id, filters=form.filters())[
            : PAGE_SIZE + 1
        ]
    )
    context = {
        "form": form,
        "records": records[:PAGE_SIZE],
        "truncated": len(records) > PAGE_SIZE,
        "page_size": PAGE_SIZE,
    }
    return render(request, "audit/list.html", context)


app_name = "audit_panel"
urlpatterns = [path("", audit_page, name="list")]
