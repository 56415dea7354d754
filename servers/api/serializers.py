"""Input and output shapes of the server routes (docs/api.md)."""

from typing import Any

from rest_framework import serializers

from gshost.api.fields import StrictCharField, TimestampField
from servers.errors import InvalidCommand
from servers.models import (
    CUSTOMER_BACKUP_STATES,
    Backup,
    BackupLocation,
    ConfigEvent,
    Job,
    JobKind,
    Schedule,
    ScheduleRun,
    SettingChange,
)
from servers.services import MAX_COMMAND_LENGTH, PowerAction, clean_command

# Input


class PowerInput(serializers.Serializer[Any]):
    action = serializers.ChoiceField(choices=[a.value for a in PowerAction])


class ConsoleInput(serializers.Serializer[Any]):
    command = StrictCharField(max_length=MAX_COMMAND_LENGTH, trim_whitespace=True)

    def validate_command(self, value: str) -> str:
        try:
            return clean_command(value)
        except InvalidCommand as refused:
            raise serializers.ValidationError(refused.message) from None


class MaintenanceInput(serializers.Serializer[Any]):
    action = serializers.ChoiceField(choices=[JobKind.WIPE.value, JobKind.REINSTALL.value])


class BackupInput(serializers.Serializer[Any]):
    name = StrictCharField(max_length=100, required=False, allow_blank=True, default="")


# Output


class ConsoleSentSerializer(serializers.Serializer[Any]):
    command = serializers.CharField()
    sent_at = TimestampField()


class JobSerializer(serializers.ModelSerializer[Job]):
    server_id = serializers.CharField()
    created_at = TimestampField()
    finished_at = TimestampField(allow_null=True)
    error = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id", "kind", "state", "progress", "server_id", "created_at", "finished_at", "error"
        ]  # fmt: skip

    def get_error(self, job: Job) -> str | None:
        return job.error or None


class BackupSerializer(serializers.ModelSerializer[Backup]):
    server_id = serializers.CharField()
    created_at = TimestampField()
    completed_at = TimestampField(allow_null=True)
    sha256 = serializers.CharField(
        source="sha256_or_none",
        allow_null=True,
        help_text="The archive's SHA-256 (hex) once a node made it; null on the simulated node.",
    )

    state = serializers.ChoiceField(
        choices=[(state.value, state.label) for state in CUSTOMER_BACKUP_STATES], required=False
    )
    location = serializers.ChoiceField(
        choices=BackupLocation.choices,
        read_only=True,
        help_text="Where the archive is kept: on the node that made it, or in object storage "
        "(restorable on any node).",
    )

    class Meta:
        model = Backup
        fields = [
            "id",
            "server_id",
            "name",
            "state",
            "size_bytes",
            "sha256",
            "location",
            "created_at",
            "completed_at",
        ]


class BackupCreatedSerializer(serializers.Serializer[Any]):
    backup = BackupSerializer()
    job = JobSerializer()


class PlayerSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    joined_at = TimestampField()


class PlayersSerializer(serializers.Serializer[Any]):
    count = serializers.IntegerField()
    max = serializers.IntegerField()
    players = PlayerSerializer(many=True)


class StatsSerializer(serializers.Serializer[Any]):
    server_id = serializers.CharField()
    state = serializers.CharField()
    sampled_at = TimestampField()
    cpu_percent = serializers.FloatField()
    memory_mb = serializers.IntegerField()
    memory_limit_mb = serializers.IntegerField()
    disk_mb = serializers.IntegerField()
    network_in_kbps = serializers.FloatField(
        allow_null=True, help_text="null where the node cannot measure it per server"
    )
    network_out_kbps = serializers.FloatField(
        allow_null=True, help_text="null where the node cannot measure it per server"
    )
    players_online = serializers.IntegerField()
    uptime_seconds = serializers.IntegerField()


class MetricsSampleSerializer(serializers.Serializer[Any]):
    at = TimestampField()
    cpu_percent = serializers.FloatField()
    memory_mb = serializers.IntegerField()
    network_in_kbps = serializers.FloatField(
        allow_null=True, help_text="null where the node cannot measure it per server"
    )
    network_out_kbps = serializers.FloatField(
        allow_null=True, help_text="null where the node cannot measure it per server"
    )
    players_online = serializers.IntegerField()


class MetricsSerializer(serializers.Serializer[Any]):
    server_id = serializers.CharField()
    window = serializers.CharField()
    interval_seconds = serializers.IntegerField()
    samples = MetricsSampleSerializer(many=True)


class MigrationStatusSerializer(serializers.Serializer[Any]):
    state = serializers.CharField()
    started_at = TimestampField(allow_null=True)
    completed_at = TimestampField(allow_null=True)
    previous_address = serializers.CharField(allow_null=True)
    new_address = serializers.CharField(allow_null=True)
    error = serializers.CharField(allow_null=True)  # why a migration failed


class CapabilitySerializer(serializers.Serializer[Any]):
    supported = serializers.BooleanField()
    enabled = serializers.BooleanField()
    required_scope = serializers.CharField()
    granted = serializers.BooleanField()


class CapabilitiesSerializer(serializers.Serializer[Any]):
    server_id = serializers.CharField()
    capabilities = serializers.DictField(child=CapabilitySerializer())


class ScheduleSerializer(serializers.ModelSerializer[Schedule]):
    server_id = serializers.CharField()
    next_run_at = TimestampField(allow_null=True)
    last_run_at = TimestampField(allow_null=True)
    created_at = TimestampField()

    class Meta:
        model = Schedule
        fields = [
            "id", "server_id", "name", "cron", "command", "enabled", "alert_on",
            "alert_after_missed", "next_run_at", "last_run_at", "created_at",
        ]  # fmt: skip


class ScheduleRunSerializer(serializers.ModelSerializer[ScheduleRun]):
    schedule_id = serializers.CharField()
    server_id = serializers.CharField(source="schedule.server_id")
    scheduled_for = TimestampField(allow_null=True)
    ran_at = TimestampField()

    class Meta:
        model = ScheduleRun
        fields = [
            "id", "schedule_id", "server_id", "trigger", "status", "command", "scheduled_for",
            "ran_at", "output",
        ]  # fmt: skip


class SettingChangeSerializer(serializers.ModelSerializer[SettingChange]):
    changed_by = serializers.SerializerMethodField()
    config_event_id = serializers.CharField(allow_null=True)
    changed_at = TimestampField()

    class Meta:
        model = SettingChange
        fields = [
            "id", "key", "previous_value", "new_value", "source", "changed_by",
            "config_event_id", "changed_at",
        ]  # fmt: skip

    def get_changed_by(self, change: SettingChange) -> str | None:
        """The person's email; null when the platform changed it (a config event)."""
        return change.changed_by or None


class DriftEntrySerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    desired = serializers.CharField()
    actual = serializers.CharField(allow_null=True)


class DriftSerializer(serializers.Serializer[Any]):
    in_sync = serializers.BooleanField()
    drift = DriftEntrySerializer(many=True)
    checked_at = TimestampField()


class ConfigEventStatusSerializer(serializers.ModelSerializer[ConfigEvent]):
    apply_at = TimestampField()
    revert_at = TimestampField(allow_null=True)

    class Meta:
        model = ConfigEvent
        fields = ["id", "name", "state", "apply_at", "revert_at"]


class ConfigEventsStatusSerializer(serializers.Serializer[Any]):
    events = ConfigEventStatusSerializer(many=True)
