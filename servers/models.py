from datetime import datetime, timedelta

from django.db import models
from django.utils import timezone

from accounts.models import Organization, User
from gshost.ids import new_id
from gshost_agent import protocol


def new_server_id() -> str:
    return new_id("srv")


def new_job_id() -> str:
    return new_id("job")


def new_backup_id() -> str:
    return new_id("bkp")


def new_schedule_id() -> str:
    return new_id("sch")


def new_run_id() -> str:
    return new_id("run")


def new_setting_change_id() -> str:
    return new_id("chg")


def new_config_event_id() -> str:
    return new_id("cfg")


SIMULATED_NODE_NAME = "simulated"
HEARTBEAT_TIMEOUT = timedelta(seconds=30)
DEFAULT_FIRST_PORT = 27000
DEFAULT_LAST_PORT = 27099


class NodeKind(models.TextChoices):
    SIMULATED = "simulated", "Simulated"
    AGENT = "agent", "Agent"


class NodeState(models.TextChoices):
    ONLINE = "online", "Online"
    UNREACHABLE = "unreachable", "Unreachable"


class Node(models.Model):
    """A machine that runs game servers: the built-in simulated node, or one running the agent.

    The token is kept encrypted (`gshost.encryption`) to call the agent, and as a SHA-256 hash
    to find the node an agent's call comes from.
    """

    name = models.CharField(max_length=50, unique=True)
    kind = models.CharField(max_length=20, choices=NodeKind.choices, default=NodeKind.AGENT)
    url = models.CharField(max_length=200, blank=True, default="")
    address = models.CharField(max_length=64, blank=True, default="")  # the public IP
    first_port = models.PositiveIntegerField(default=DEFAULT_FIRST_PORT)
    last_port = models.PositiveIntegerField(default=DEFAULT_LAST_PORT)
    ca_pem = models.TextField(blank=True, default="")  # empty: the system's CAs
    encrypted_token = models.TextField(blank=True, default="")
    token_hash = models.CharField(max_length=64, unique=True, null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    agent_version = models.CharField(max_length=100, blank=True, default="")
    # The agent's outbox and the highest report sequence number applied from it.
    outbox_id = models.CharField(max_length=100, blank=True, default="")
    last_report_seq = models.BigIntegerField(default=0)
    # Until when its heartbeats look for withdrawals it has not taken (set when one is
    # recorded for it): a heartbeat at any other time reads nothing of them.
    withdrawals_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Capacity (CONTRACT §15.1): null until staff set it or the agent's first heartbeat tells
    # its machine's (total memory, free disk of its data directory, 100 x its cores).
    memory_mb = models.PositiveIntegerField(null=True, blank=True)
    disk_mb = models.PositiveIntegerField(null=True, blank=True)
    cpu_percent = models.PositiveIntegerField(null=True, blank=True)
    overallocate_percent = models.PositiveIntegerField(default=0)
    tags = models.JSONField(default=list, blank=True)  # ["eu", "ssd"]: placement keeps to them
    drained = models.BooleanField(default=False)  # no new servers are placed on it
    # What the agent last said in its heartbeat: how it seals games off, and its games.
    isolation = models.CharField(max_length=100, blank=True, default="")
    games = models.JSONField(default=list, blank=True)
    # Each game's capabilities as its template lists them: {"name": ["backups", …]}.
    game_capabilities = models.JSONField(default=dict, blank=True)
    # Its agent's SFTP, as its heartbeat tells: the port (None: not served) and host key.
    sftp_port = models.PositiveIntegerField(null=True, blank=True)
    sftp_host_key_fingerprint = models.CharField(max_length=100, blank=True, default="")

    def __str__(self) -> str:
        return self.name

    @property
    def port_count(self) -> int:
        return self.last_port - self.first_port + 1

    def state(self, now: datetime | None = None) -> NodeState:
        """Online with a heartbeat in the last 30 s; the simulated node is always online."""
        if self.kind == NodeKind.SIMULATED:
            return NodeState.ONLINE
        moment = now or timezone.now()
        heard = self.last_heartbeat_at
        if heard is not None and moment - heard <= HEARTBEAT_TIMEOUT:
            return NodeState.ONLINE
        return NodeState.UNREACHABLE


class ServerState(models.TextChoices):
    """The node protocol's states (`gshost_agent.protocol.ServerState`), with their labels."""

    STOPPED = protocol.ServerState.STOPPED.value, "Stopped"
    STARTING = protocol.ServerState.STARTING.value, "Starting"
    RUNNING = protocol.ServerState.RUNNING.value, "Running"
    STOPPING = protocol.ServerState.STOPPING.value, "Stopping"
    RESTARTING = protocol.ServerState.RESTARTING.value, "Restarting"


class Server(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=new_server_id)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="servers")
    name = models.CharField(max_length=100)
    # A game some node offers: a template's name on agent nodes (servers.game.registry).
    game = models.CharField(max_length=32, default="minecraft")
    state = models.CharField(
        max_length=20, choices=ServerState.choices, default=ServerState.STOPPED
    )
    address = models.CharField(max_length=64, blank=True, default="")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="servers")
    port = models.PositiveIntegerField(null=True, blank=True)  # from the node's range; agents only
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    # When `state` last changed: a runtime times transitional states from it; uptime too.
    state_changed_at = models.DateTimeField(default=timezone.now)
    # Capabilities staff turned off for this server's plan (names from servers.game.capabilities).
    disabled_capabilities = models.JSONField(default=list, blank=True)
    # Game settings as strings, like a server.properties file: what the customer wants, and
    # what the host last reported running with. Keys missing from either take the default.
    desired_settings = models.JSONField(default=dict, blank=True)
    reported_settings = models.JSONField(default=dict, blank=True)
    # The plan (CONTRACT §14.2): the kernel holds the game to it, placement counts it.
    memory_mb = models.PositiveIntegerField(default=1024)
    disk_mb = models.PositiveIntegerField(default=10240)
    cpu_percent = models.PositiveIntegerField(default=100)  # 100 = one core
    processes = models.PositiveIntegerField(default=256)
    backups_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="How many backups it keeps: a new one deletes the oldest beyond it. "
        "0: none are made; empty: no limit.",
    )
    restart_on_crash = models.BooleanField(default=True)
    # When a crash is to be followed by an automatic start (docs/nodes.md, "Crash restarts");
    # cleared by that start, or by any other move of the state before it.
    restart_due_at = models.DateTimeField(null=True, blank=True)
    # Set by the Application API's suspend, cleared by unsuspend: customers are refused every
    # action (servers.errors.ServerSuspended) while it is set.
    suspended_at = models.DateTimeField(null=True, blank=True)
    # Asked for by the Application API and carried out when the node answers
    # (servers.desired): a reinstall (an empty directory, backups kept), and a deletion (the
    # game stopped, its directory and backups removed, then this row). A server being deleted
    # is not found by customers from the moment it is asked.
    reinstall_requested_at = models.DateTimeField(null=True, blank=True)
    delete_requested_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["organization", "created_at"]),
            models.Index(fields=["state", "state_changed_at"]),
            models.Index(
                fields=["restart_due_at"],
                condition=models.Q(restart_due_at__isnull=False),
                name="server_restart_due",
            ),
            # What the convergence loop looks at: few rows, found without a scan.
            models.Index(
                fields=["id"],
                condition=models.Q(suspended_at__isnull=False)
                | models.Q(reinstall_requested_at__isnull=False)
                | models.Q(delete_requested_at__isnull=False),
                name="server_desired_pending",
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["node", "port"], name="one_server_per_node_port")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"

    @property
    def suspended(self) -> bool:
        return self.suspended_at is not None

    @property
    def deleting(self) -> bool:
        return self.delete_requested_at is not None


class ServerTransition(models.Model):
    """One change of a server's state, whatever caused it: the lifecycle's own history."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="transitions")
    from_state = models.CharField(max_length=20, choices=ServerState.choices)
    to_state = models.CharField(max_length=20, choices=ServerState.choices)
    trigger = models.CharField(max_length=20)
    cause = models.CharField(max_length=200, blank=True, default="")
    exit_code = models.IntegerField(null=True, blank=True)
    # How a game on an agent node ended: the signal, and whether the kernel killed it for memory.
    signal = models.IntegerField(null=True, blank=True)
    oom = models.BooleanField(default=False)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["server", "-at", "-id"])]

    def __str__(self) -> str:
        return f"{self.server_id}: {self.from_state} -> {self.to_state} ({self.trigger})"


class ServerMinute(models.Model):
    """One minute of a server on an agent node: the means of its node's 10-second samples in
    that minute, as its heartbeats carried them (kept 24 h). Its metrics are read from these."""

    pk = models.CompositePrimaryKey("server", "at")
    # The primary key's index serves the server's lookups: no index of its own.
    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="+", db_index=False)
    at = models.DateTimeField()  # the minute's start
    cpu_percent = models.FloatField()
    memory_mb = models.FloatField()
    players_online = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["at"], name="server_minute_at")]  # the purge's

    def __str__(self) -> str:
        return f"{self.server_id} at {self.at:%Y-%m-%d %H:%M}"


class ConsoleCommand(models.Model):
    """A command sent to a server's console, with what the game answered."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="console_commands")
    command = models.TextField()
    source = models.CharField(max_length=10)  # api, panel or system (a schedule)
    key_id = models.CharField(max_length=8, blank=True, default="")
    user_email = models.CharField(max_length=254, blank=True, default="")
    sent_at = models.DateTimeField(default=timezone.now)
    accepted = models.BooleanField(default=True)
    output = models.TextField(blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["server", "-sent_at", "-id"])]

    def __str__(self) -> str:
        return f"{self.server_id}: {self.command[:40]}"


class BackupState(models.TextChoices):
    CREATING = "creating", "Creating"
    AVAILABLE = "available", "Available"
    FAILED = "failed", "Failed"
    # Staff deleted it: its object leaves the bucket after commit, then the row goes.
    DELETING = "deleting", "Deleting"


# What a customer is shown: a backup being deleted is already gone for them.
CUSTOMER_BACKUP_STATES = [BackupState.CREATING, BackupState.AVAILABLE, BackupState.FAILED]


class BackupLocation(models.TextChoices):
    NODE = "node", "On the node"
    OBJECT_STORAGE = "object_storage", "Object storage"


class Backup(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=new_backup_id)
    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="backups")
    name = models.CharField(max_length=100, blank=True, default="")
    state = models.CharField(
        max_length=20, choices=BackupState.choices, default=BackupState.CREATING
    )
    size_bytes = models.BigIntegerField(null=True, blank=True)
    # The archive's SHA-256 (hex) where the node made a real one; a restore checks it.
    sha256 = models.CharField(max_length=64, blank=True, default="")
    location = models.CharField(
        max_length=20, choices=BackupLocation.choices, default=BackupLocation.NODE
    )
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["server", "-created_at", "-id"])]

    def __str__(self) -> str:
        return f"{self.name or self.id} ({self.state})"

    @property
    def sha256_or_none(self) -> str | None:
        return self.sha256 or None


class JobKind(models.TextChoices):
    """The node protocol's job kinds (`gshost_agent.protocol.JobKind`), with their labels."""

    BACKUP = protocol.JobKind.BACKUP.value, "Backup"
    RESTORE = protocol.JobKind.RESTORE.value, "Restore"
    WIPE = protocol.JobKind.WIPE.value, "Wipe"
    REINSTALL = protocol.JobKind.REINSTALL.value, "Reinstall"


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class Job(models.Model):
    """Work the runtime does on a server's data. Its state and progress live here."""

    id = models.CharField(primary_key=True, max_length=40, default=new_job_id)
    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="jobs")
    kind = models.CharField(max_length=20, choices=JobKind.choices)
    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)
    backup = models.ForeignKey(
        Backup, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    requested_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["server", "-created_at", "-id"]),
            models.Index(fields=["state", "created_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.state})"

    @property
    def finished(self) -> bool:
        return self.state in (JobState.SUCCEEDED, JobState.FAILED)


class MigrationState(models.TextChoices):
    MIGRATING = "migrating", "Migrating"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"  # the server stayed where it was (agent nodes)


class ServerMigration(models.Model):
    """A move of a server to another host; its address changes when it completes. Between
    agent nodes, `target_node` is where it goes and `error` why it did not."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="migrations")
    state = models.CharField(
        max_length=20, choices=MigrationState.choices, default=MigrationState.MIGRATING
    )
    previous_address = models.CharField(max_length=64)
    new_address = models.CharField(max_length=64)
    requested_by = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    target_node = models.ForeignKey(
        Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    error = models.CharField(max_length=500, blank=True, default="")
    run_started_at = models.DateTimeField(null=True, blank=True)  # a worker took the move

    class Meta:
        indexes = [models.Index(fields=["server", "-started_at", "-id"])]
        constraints = [
            models.UniqueConstraint(
                fields=["server"],
                condition=models.Q(state="migrating"),
                name="one_migration_at_a_time",
            )
        ]

    def __str__(self) -> str:
        return f"{self.server_id}: {self.previous_address} -> {self.new_address}"


class RunStatus(models.TextChoices):
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"


ALERTABLE_STATUSES = (RunStatus.FAILED.value, RunStatus.SKIPPED.value)


class RunTrigger(models.TextChoices):
    SCHEDULE = "schedule", "Schedule"
    RUN_NOW = "run_now", "Run now"


class Schedule(models.Model):
    """A console command run on a cron schedule (UTC)."""

    id = models.CharField(primary_key=True, max_length=40, default=new_schedule_id)
    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="schedules")
    name = models.CharField(max_length=100)
    cron = models.CharField(max_length=100)
    command = models.TextField()
    enabled = models.BooleanField(default=True)
    alert_on = models.JSONField(default=list, blank=True)  # a subset of ALERTABLE_STATUSES
    alert_after_missed = models.PositiveSmallIntegerField(default=3)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # The next slot to run; null while disabled. Claimed by compare-and-set on this value.
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    missed_in_a_row = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(fields=["server", "-created_at", "-id"]),
            models.Index(fields=["enabled", "next_run_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.cron})"


class ScheduleRun(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=new_run_id)
    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="runs")
    trigger = models.CharField(max_length=20, choices=RunTrigger.choices)
    status = models.CharField(max_length=20, choices=RunStatus.choices)
    command = models.TextField()
    scheduled_for = models.DateTimeField(null=True, blank=True)
    ran_at = models.DateTimeField(default=timezone.now)
    output = models.TextField(blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["schedule", "-ran_at", "-id"])]

    def __str__(self) -> str:
        return f"{self.schedule_id} {self.trigger} {self.status}"


class ConfigEventState(models.TextChoices):
    SCHEDULED = "scheduled", "Scheduled"
    APPLIED = "applied", "Applied"
    REVERTED = "reverted", "Reverted"
    CANCELLED = "cancelled", "Cancelled"


class ConfigEvent(models.Model):
    """Settings changed at `apply_at` and, if `revert_at` is set, changed back then."""

    id = models.CharField(primary_key=True, max_length=40, default=new_config_event_id)
    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="config_events")
    name = models.CharField(max_length=100)
    changes = models.JSONField(default=dict)  # {setting key: value while the event is on}
    apply_at = models.DateTimeField()
    revert_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(
        max_length=20, choices=ConfigEventState.choices, default=ConfigEventState.SCHEDULED
    )
    previous_values = models.JSONField(default=dict, blank=True)  # taken when applied
    applied_at = models.DateTimeField(null=True, blank=True)
    # When it reached its last state (reverted, cancelled, or applied with nothing to revert).
    settled_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["server", "apply_at"]),
            models.Index(fields=["state", "apply_at"]),
            models.Index(fields=["state", "revert_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"


class SettingSource(models.TextChoices):
    PANEL = "panel", "Panel"
    CONFIG_EVENT = "config_event", "Config event"
    ADMIN = "admin", "Admin"


class SettingChange(models.Model):
    """One change of one desired setting: the settings history."""

    id = models.CharField(primary_key=True, max_length=40, default=new_setting_change_id)
    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="setting_changes")
    key = models.CharField(max_length=50)
    previous_value = models.CharField(max_length=200)
    new_value = models.CharField(max_length=200)
    source = models.CharField(max_length=20, choices=SettingSource.choices)
    changed_by = models.CharField(max_length=254, blank=True, default="")
    config_event = models.ForeignKey(
        ConfigEvent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["server", "-changed_at", "-id"])]

    def __str__(self) -> str:
        return f"{self.key}: {self.previous_value} -> {self.new_value}"


class PendingWithdrawal(models.Model):
    """A withdrawal of access (gshost.withdrawals) a node has not said it holds yet: pushed to
    its agent at once, and carried by each heartbeat's answer until the agent lists it as
    taken, or for WITHDRAWAL_KEPT (a console token lives 5 minutes; docs/console.md)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="pending_withdrawals")
    message = models.JSONField()  # gshost_agent.withdrawals.Withdrawal.to_json()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["node", "created_at"])]

    def __str__(self) -> str:
        return f"{self.node_id}: {self.message.get('reason', '')}"
