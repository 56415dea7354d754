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
from audit.services import PanelContext
from gshost.errors import DomainError
from gshost.panel_errors import refusal_message
from gshost.templatetags.measures import signal_name
from servers.agents.rebuild import server_rebuild_start
from servers.agents.transfers import migration_to_node_start
from servers.backups.storage import backup_delete
from servers.fleet.moves import migration_begin, suggest_new_address
from servers.fleet.nodes import node_rotate_token, node_set_drained
from servers.fleet.placement import (
    PLAN_BOUNDS,
    NodeLoad,
    Plan,
    load_of,
    nodes_with_usage,
    placement_refusal,
)
from servers.game.capabilities import Capability
from servers.game.registry import offered_games
from servers.models import (
    Backup,
    ConfigEvent,
    Job,
    Node,
    NodeKind,
    Schedule,
    ScheduleRun,
    Server,
    ServerState,
    ServerTransition,
    SettingChange,
)
from servers.runtime import host_traits
from servers.services import (
    server_create,
    server_delete_request,
    server_reinstall_request,
    server_suspend,
    server_unsuspend,
)
from servers.simulated.mishaps import mishap_crash, mishap_fail_start


class ServerAdminForm(forms.ModelForm):
    game = forms.ChoiceField(help_text="A game some node offers (the nodes' templates).")
    disabled_capabilities = forms.MultipleChoiceField(
        choices=[(c.value, c.value) for c in Capability],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="Turned off for this server's plan: its routes answer 403 feature_not_enabled.",
    )

    class Meta:
        model = Server
        fields = (
            "organization", "name", "game", "address", "memory_mb", "disk_mb", "cpu_percent",
            "processes", "backups_limit", "restart_on_crash", "disabled_capabilities",
        )  # fmt: skip

    # The node and port are chosen when the server is created, by the placement rule.

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        games = set(offered_games(list(Node.objects.all())))
        if not self.instance._state.adding:
            games.add(self.instance.game)
        field = self.fields["game"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(game, game) for game in sorted(games)]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        try:
            plan = Plan(*(cleaned[name] for name in PLAN_BOUNDS))
        except DomainError as refused:
            raise forms.ValidationError(refused.message) from None
        if self.instance._state.adding:
            refusal = placement_refusal(game=cleaned["game"], plan=plan)
            if refusal is not None:
                raise forms.ValidationError(refusal.message)
        return cleaned


class MigrateToNodeForm(forms.Form):
    target = forms.ModelChoiceField(
        queryset=Node.objects.filter(kind=NodeKind.AGENT).order_by("name"), label="Agent node"
    )


class RebuildOnNodeForm(forms.Form):
    target = forms.ModelChoiceField(
        queryset=Node.objects.filter(kind=NodeKind.AGENT).order_by("name"),
        label="Agent node",
        required=False,
        empty_label="Placed by the placement rule",
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
        "name", "id", "organization", "game", "state", "node", "address", "memory_mb",
        "restart_on_crash", "suspended_at", "delete_requested_at", "created_at",
    )  # fmt: skip
    list_filter = ("game", "state", "node", "organization")
    search_fields = ("name", "id", "organization__name", "organization__slug")
    # Suspension, reinstall and deletion are asked through their services (servers.desired
    # carries them out), never set by hand.
    readonly_fields = (
        "id", "node", "port", "state", "state_changed_at", "desired_settings",
        "reported_settings", "suspended_at", "reinstall_requested_at", "delete_requested_at",
        "created_at", "updated_at",
    )  # fmt: skip
    list_select_related = ("organization", "node")
    autocomplete_fields = ("organization",)
    inlines = (TransitionInline,)
    actions = (
        "simulate_crash", "simulate_fail_start", "simulate_migrate", "migrate_to_node",
        "rebuild_on_node", "suspend", "unsuspend", "reinstall",
    )  # fmt: skip

    def save_model(self, request: HttpRequest, obj: Server, form: Any, change: bool) -> None:
        """A server added here is placed as `createserver` places one (the placement rule);
        `createserver --node` puts one on a node named."""
        if change:
            super().save_model(request, obj, form, change)
            return
        created = server_create(
            organization=obj.organization,
            name=obj.name,
            game=obj.game,
            address=obj.address,
            plan=Plan.of(obj),
            restart_on_crash=obj.restart_on_crash,
            backups_limit=obj.backups_limit,
            actor=Actor.person(PanelContext.from_request(request)),
        )
        Server.objects.filter(id=created.id).update(disabled_capabilities=obj.disabled_capabilities)
        created.disabled_capabilities = obj.disabled_capabilities
        for field in Server._meta.concrete_fields:
            setattr(obj, field.attname, getattr(created, field.attname))
        obj._state.adding = False

    @admin.action(description="Suspend: stop the game, refuse the customer every action")
    def suspend(self, request: HttpRequest, queryset: QuerySet[Server]) -> None:
        actor = Actor.person(PanelContext.from_request(request))

        def act(server: Server) -> str:
            server_suspend(server=server, actor=actor)
            return "suspended; its game is stopped once its node answers."

        _each(request, queryset, act)

    @admin.action(description="Unsuspend (the game is not started)")
    def unsuspend(self, request: HttpRequest, queryset: QuerySet[Server]) -> None:
        actor = Actor.person(PanelContext.from_request(request))
        _each(request, queryset, lambda s: _unsuspended(server_unsuspend(server=s, actor=actor)))

    @admin.action(description="Reinstall: an empty directory once its node answers (backups kept)")
    def reinstall(self, request: HttpRequest, queryset: QuerySet[Server]) -> None:
        actor = Actor.person(PanelContext.from_request(request))

        def act(server: Server) -> str:
            server_reinstall_request(server=server, actor=actor)
            return "to be reinstalled once its node answers (its game stopped first)."

        _each(request, queryset, act)

    def delete_model(self, request: HttpRequest, obj: Server) -> None:
        self.delete_queryset(request, Server.objects.filter(id=obj.id))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Server]) -> None:
        """Deletion as the Application API asks it: customers lose the server at once; its
        game, directory and backups go when its node answers, then its rows."""
        actor = Actor.person(PanelContext.from_request(request))
        for server in queryset.filter(delete_requested_at__isnull=True):
            try:
                server_delete_request(server=server, actor=actor)
            except DomainError as refused:
                messages.error(request, f"{server.name}: {refusal_message(refused)}")

    @admin.action(description="Crash now: kill the game (running or restarting servers)")
    def simulate_crash(self, request: HttpRequest, queryset: QuerySet[Server]) -> None:
        actor = Actor.system(_cause(request))
        _each(request, queryset, lambda s: _killed(mishap_crash(server=s, actor=actor)))

    @admin.action(description="Simulate: fail to start (stopped or starting simulated servers)")
    def simulate_fail_start(self, request: HttpRequest, queryset: QuerySet[Server]) -> None:
        actor = Actor.system(_cause(request))
        _each(request, queryset, lambda s: _state(mishap_fail_start(server=s, actor=actor)))

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

    @admin.action(description="Rebuild on another node… (its node is gone: from its latest backup)")
    def rebuild_on_node(
        self, request: HttpRequest, queryset: QuerySet[Server]
    ) -> TemplateResponse | None:
        form = RebuildOnNodeForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            target, actor = form.cleaned_data["target"], Actor.system(_cause(request))

            def begin(server: Server) -> str:
                migration = server_rebuild_start(server=server, target=target, actor=actor)
                node = migration.target_node.name if migration.target_node else "?"
                return f"rebuilding on node {node}; its migration-status follows it."

            _each(request, queryset.select_related("node"), begin)
            return None
        context = {
            **self.admin_site.each_context(request),
            "form": form,
            "servers": queryset.select_related("node"),
        }
        return TemplateResponse(request, "admin/servers/rebuild_on_node.html", context)


def _unsuspended(server: Server) -> str:
    return f"not suspended; it is {server.state}."


def _state(server: Server) -> str:
    return f"now {server.state}; server.crashed fired."


def _killed(server: Server) -> str:
    if server.state == ServerState.STOPPED:
        return _state(server)
    return f"its game on node {server.node.name} was killed; the node reports the crash."


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
    """Deleting a backup kept in object storage marks it deleting; its object goes after the
    admin's transaction commits, then its row (the catch-up retries a bucket that refused)."""

    list_display = ("id", "server", "name", "state", "location", "size_bytes", "created_at")
    list_filter = ("state", "location")
    search_fields = ("id", "server__id", "server__name")

    def delete_model(self, request: HttpRequest, obj: Backup) -> None:
        self.delete_queryset(request, Backup.objects.filter(id=obj.id))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Backup]) -> None:
        actor = Actor.person(PanelContext.from_request(request))
        for backup in queryset.select_related("server"):
            try:
                backup_delete(backup=backup, actor=actor)
            except DomainError as refused:
                messages.error(request, f"{backup.id}: {refusal_message(refused)}")


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
    """A fleet at a glance: per node its URL and address, state, isolation, whether it is
    drained, its servers, the memory and disk their plans commit of its capacity (with
    overallocation), and its free ports. Nodes are registered with `createnode` (it prints the
    token once). The token is never a field here: the rotate action shows a new one once, on a
    page that is not cached."""

    list_display = (
        "name", "url", "address", "state", "isolation", "drained", "servers", "memory", "disk",
        "free_ports", "tags", "last_heartbeat_at",
    )  # fmt: skip
    list_filter = ("drained", "kind")
    fields = (
        "name", "kind", "url", "address", "first_port", "last_port", "ca_pem",
        "memory_mb", "disk_mb", "cpu_percent", "overallocate_percent", "tags", "drained",
        "isolation", "games", "sftp_port", "sftp_host_key_fingerprint", "last_heartbeat_at",
        "agent_version", "outbox_id", "last_report_seq", "created_at",
    )  # fmt: skip
    readonly_fields = (
        "name", "kind", "first_port", "last_port", "drained", "isolation", "games",
        "sftp_port", "sftp_host_key_fingerprint", "last_heartbeat_at", "agent_version",
        "outbox_id", "last_report_seq", "created_at",
    )  # fmt: skip
    search_fields = ("name", "address", "url")
    actions = ("drain", "undrain", "rotate_token")

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
        return load_of(node).servers

    @admin.display(description="memory committed", ordering="memory_committed")
    def memory(self, node: Node) -> str:
        load = load_of(node)
        return _committed(load, load.memory_committed, node.memory_mb)

    @admin.display(description="disk committed", ordering="disk_committed")
    def disk(self, node: Node) -> str:
        load = load_of(node)
        return _committed(load, load.disk_committed, node.disk_mb)

    @admin.display(description="free ports")
    def free_ports(self, node: Node) -> str:
        free = load_of(node).free_ports
        return "—" if free is None else f"{free} of {node.port_count}"

    @admin.action(description="Drain: place no new servers here (its servers keep running)")
    def drain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        self._set_drained(request, queryset, drained=True)

    @admin.action(description="Undrain: place new servers here again")
    def undrain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        self._set_drained(request, queryset, drained=False)

    def _set_drained(self, request: HttpRequest, queryset: QuerySet[Node], drained: bool) -> None:
        actor = Actor.person(PanelContext.from_request(request))
        names = [node_set_drained(node=n, drained=drained, actor=actor).name for n in queryset]
        word = "drained" if drained else "undrained"
        messages.success(request, f"{word.capitalize()}: {', '.join(names) or 'none'}.")

    @admin.action(description="Rotate the token (shown once; the agent needs the new one)")
    def rotate_token(self, request: HttpRequest, queryset: QuerySet[Node]) -> HttpResponse | None:
        agents = [node for node in queryset if host_traits(node).has_token]
        if len(agents) != 1:
            messages.error(request, "Choose exactly one agent node to rotate its token.")
            return None
        node = agents[0]
        token = node_rotate_token(node=node, actor=Actor.person(PanelContext.from_request(request)))
        context = {**self.admin_site.each_context(request), "node": node, "token": token}
        response = TemplateResponse(request, "admin/servers/node_token.html", context)
        response["Cache-Control"] = "no-store"
        return response


def _committed(load: NodeLoad, committed: int, capacity: int | None) -> str:
    """`3072 of 8192 MB` (with overallocation: `of 8192 MB + 20 %`); `3072 MB` without one."""
    if capacity is None:
        limited = host_traits(load.node).measures_capacity
        return f"{committed} MB" + ("" if limited else " (no limit)")
    over = load.node.overallocate_percent
    return f"{committed} of {capacity} MB" + (f" + {over} %" if over else "")
