"""Staff admin for servers: plan switches (disabled capabilities), simulated host mishaps,
and read-only views of the rows the platform keeps (transitions, jobs, schedules...)."""

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from audit.actors import Actor
from gshost.errors import DomainError
from gshost.panel_errors import refusal_message
from gshost.templatetags.measures import signal_name
from servers.capabilities import Capability
from servers.models import (
    Backup,
    ConfigEvent,
    Job,
    Node,
    NodeKind,
    Schedule,
    ScheduleRun,
    Server,
    ServerTransition,
    SettingChange,
)
from servers.node_transfers import migration_to_node_start
from servers.nodes import free_port_count, node_rotate_token, nodes_with_usage, simulated_node
from servers.simulated_host import host_crash, host_fail_start
from servers.transfers import migration_begin, suggest_new_address


class ServerAdminForm(forms.ModelForm):
    disabled_capabilities = forms.MultipleChoiceField(
        choices=[(c.value, c.value) for c in Capability],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="Turned off for this server's plan: its routes answer 403 feature_not_enabled.",
    )

    class Meta:
        model = Server
        fields = ("organization", "name", "game", "address", "disabled_capabilities")

    # The node and port are chosen when the server is created (createserver).


class MigrateToNodeForm(forms.Form):
    target = forms.ModelChoiceField(
        queryset=Node.objects.filter(kind=NodeKind.AGENT).order_by("name"), label="Agent node"
    )


class TransitionInline(admin.TabularInline):
    model = ServerTransition
    extra = 0
    ordering = ("-at", "-id")
    fields = readonly_fields = (
        "at",
        "from_state",
        "to_state",
        "trigger",
        "exit_code",
        "ended_by",
        "cause",
    )
    can_delete = False
    max_num = 0
    show_change_link = False

    @admin.display(description="ended by")
    def ended_by(self, transition: ServerTransition) -> str:
        """The signal that ended the game and whether the kernel killed it for memory."""
        parts = [signal_name(transition.signal)] if transition.signal is not None else []
        if transition.oom:
            parts.append("out of memory")
        return ", ".join(parts) or "—"


def _each(
    request: HttpRequest,
    servers: QuerySet[Server],
    act: Callable[[Server], str],
) -> None:
    for server in servers:
        try:
            messages.success(request, f"{server.name}: {act(server)}")
        except DomainError as refused:
            messages.error(request, f"{server.name}: {refusal_message(refused)}")


def _cause(request: HttpRequest) -> str:
    return f"admin {getattr(request.user, 'email', '')}"


@admin.register(Server)
class ServerAdmin(admin.ModelAdmin):
    form = ServerAdminForm
    list_display = (
        "name", "id", "organization", "game", "state", "node", "address", "created_at"
    )  # fmt: skip
    list_filter = ("game", "state", "node", "organization")
    search_fields = ("name", "id", "organization__name", "organization__slug")
    readonly_fields = (
        "id", "node", "port", "state", "state_changed_at", "desired_settings",
        "reported_settings", "created_at", "updated_at",
    )  # fmt: skip
    list_select_related = ("organization", "node")
    autocomplete_fields = ("organization",)
    inlines = (TransitionInline,)
    actions = ("simulate_crash", "simulate_fail_start", "simulate_migrate", "migrate_to_node")

    def save_model(self, request: HttpRequest, obj: Server, form: Any, change: bool) -> None:
        """A server added here goes on the simulated node; `createserver --node` places one
        on an agent node (with a port of its range)."""
        if not change and obj.node_id is None:
            obj.node = simulated_node()
        super().save_model(request, obj, form, change)

    @admin.action(description="Simulate: crash now (running or restarting servers)")
    def simulate_crash(self, request: HttpRequest, queryset: QuerySet[Server]) -> None:
        cause = _cause(request)
        _each(request, queryset, lambda s: _state(host_crash(server_id=s.id, cause=cause)))

    @admin.action(description="Simulate: fail to start (stopped or starting servers)")
    def simulate_fail_start(self, request: HttpRequest, queryset: QuerySet[Server]) -> None:
        cause = _cause(request)
        _each(request, queryset, lambda s: _state(host_fail_start(server_id=s.id, cause=cause)))

    @admin.action(description="Simulate: migrate to another host")
    def simulate_migrate(self, request: HttpRequest, queryset: QuerySet[Server]) -> None:
        actor = Actor.system(_cause(request))

        def migrate(server: Server) -> str:
            new = suggest_new_address(server.address)
            migration_begin(server=server, new_address=new, actor=actor)
            return f"moving to {new}; server.migrated fires when the move completes."

        _each(request, queryset, migrate)

    @admin.action(description="Migrate to node… (agent nodes: the data moves too)")
    def migrate_to_node(
        self, request: HttpRequest, queryset: QuerySet[Server]
    ) -> TemplateResponse | None:
        form = MigrateToNodeForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            target, actor = form.cleaned_data["target"], Actor.system(_cause(request))

            def begin(server: Server) -> str:
                migration_to_node_start(server=server, target=target, actor=actor)
                return f"moving to node {target.name}; its migration-status follows the move."

            _each(request, queryset.select_related("node"), begin)
            return None
        context = {
            **self.admin_site.each_context(request),
            "form": form,
            "servers": queryset.select_related("node"),
        }
        return TemplateResponse(request, "admin/servers/migrate_to_node.html", context)


def _state(server: Server) -> str:
    return f"now {server.state}; server.crashed fired."


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows the platform writes; staff look, they do not edit."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ("id", "server", "kind", "state", "progress", "created_at", "finished_at")
    list_filter = ("kind", "state")
    search_fields = ("id", "server__id", "server__name")


@admin.register(Backup)
class BackupAdmin(ReadOnlyAdmin):
    list_display = ("id", "server", "name", "state", "size_bytes", "created_at")
    list_filter = ("state",)
    search_fields = ("id", "server__id", "server__name")


@admin.register(Schedule)
class ScheduleAdmin(ReadOnlyAdmin):
    list_display = ("name", "id", "server", "cron", "enabled", "next_run_at", "last_run_at")
    list_filter = ("enabled",)
    search_fields = ("id", "name", "server__id", "server__name")


@admin.register(ScheduleRun)
class ScheduleRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "schedule", "trigger", "status", "scheduled_for", "ran_at")
    list_filter = ("trigger", "status")


@admin.register(ConfigEvent)
class ConfigEventAdmin(ReadOnlyAdmin):
    list_display = ("name", "id", "server", "state", "apply_at", "revert_at")
    list_filter = ("state",)


@admin.register(SettingChange)
class SettingChangeAdmin(ReadOnlyAdmin):
    list_display = ("server", "key", "previous_value", "new_value", "source", "changed_at")
    list_filter = ("source", "key")


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    """Nodes are registered with `createnode` (it prints the token once). The token is never
    a field here: the rotate action shows a new one once, on a page that is not cached."""

    list_display = (
        "name", "kind", "url", "address", "state", "last_heartbeat_at", "servers", "free_ports"
    )  # fmt: skip
    fields = (
        "name", "kind", "url", "address", "first_port", "last_port", "ca_pem",
        "last_heartbeat_at", "agent_version", "outbox_id", "last_report_seq", "created_at",
    )  # fmt: skip
    readonly_fields = (
        "name", "kind", "first_port", "last_port", "last_heartbeat_at", "agent_version",
        "outbox_id", "last_report_seq", "created_at",
    )  # fmt: skip
    search_fields = ("name", "address", "url")
    actions = ("rotate_token",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Node]:
        return nodes_with_usage()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # createnode: the token must be shown to whoever runs it

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None or not obj.servers.exists()

    @admin.display(description="state")
    def state(self, node: Node) -> str:
        return node.state().value

    @admin.display(description="servers", ordering="server_count")
    def servers(self, node: Node) -> int:
        return int(getattr(node, "server_count", 0))

    @admin.display(description="free ports")
    def free_ports(self, node: Node) -> str:
        free = free_port_count(node)
        return "—" if free is None else f"{free} of {node.port_count}"

    @admin.action(description="Rotate the token (shown once; the agent needs the new one)")
    def rotate_token(self, request: HttpRequest, queryset: QuerySet[Node]) -> HttpResponse | None:
        agents = [node for node in queryset if node.is_agent]
        if len(agents) != 1:
            messages.error(request, "Choose exactly one agent node to rotate its token.")
            return None
        node = agents[0]
        token = node_rotate_token(node=node)
        context = {**self.admin_site.each_context(request), "node": node, "token": token}
        response = TemplateResponse(request, "admin/servers/node_token.html", context)
        response["Cache-Control"] = "no-store"
        return response
