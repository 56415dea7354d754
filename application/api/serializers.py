"""The Application API's bodies: what comes in (validated, strict JSON types) and goes out."""

from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from rest_framework import serializers

from accounts.models import Organization, Role
from application.models import Customer, Plan, SoldServer
from application.sold_servers import pending_restart
from gshost.api.fields import StrictCharField, TimestampField
from servers.fleet.placement import PLAN_BOUNDS
from servers.fleet.placement import Plan as Limits
from servers.models import Server

LIMIT_NAMES = tuple(PLAN_BOUNDS)
_timestamp = TimestampField().to_representation


class Closed(serializers.Serializer[Any]):
    """A body with a member this route does not know is refused, not silently half-applied."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON number only: DRF would take "5" or true."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


def external_id_field(**kwargs: Any) -> StrictCharField:
    return StrictCharField(max_length=191, min_length=1, **kwargs)


def limit_field(name: str, **kwargs: Any) -> StrictIntegerField:
    low, high = PLAN_BOUNDS[name]
    return StrictIntegerField(min_value=low, max_value=high, **kwargs)


class LimitsSerializer(Closed):
    memory_mb = limit_field("memory_mb", help_text="Memory, MB.")
    disk_mb = limit_field("disk_mb", help_text="Disk, MB.")
    cpu_percent = limit_field("cpu_percent", help_text="CPU, percent of one core.")
    processes = limit_field("processes", help_text="Processes and threads at most.")


def limits_from(data: dict[str, int]) -> Limits:
    return Limits(**{name: data[name] for name in LIMIT_NAMES})


def tags_field(**kwargs: Any) -> serializers.ListField:
    return serializers.ListField(child=StrictCharField(max_length=50), max_length=20, **kwargs)


# Customers


class OwnerInSerializer(Closed):
    email = serializers.EmailField(max_length=254)
    name = StrictCharField(max_length=200, required=False, allow_blank=True, default="")


class CustomerCreateSerializer(Closed):
    external_id = external_id_field()
    name = StrictCharField(max_length=200)
    owner = OwnerInSerializer()


class OwnerChangeSerializer(Closed):
    name = StrictCharField(max_length=200, allow_blank=True)


class CustomerChangeSerializer(Closed):
    external_id = external_id_field(required=False)
    name = StrictCharField(max_length=200, required=False)
    owner = OwnerChangeSerializer(required=False, help_text="The owner's name; not the email.")


class OwnerSerializer(serializers.Serializer[Any]):
    email = serializers.EmailField(allow_null=True)
    name = serializers.CharField()


class CustomerSerializer(serializers.Serializer[Organization]):
    id = serializers.CharField(help_text="The organization's id (org_...).")
    external_id = serializers.CharField(allow_null=True)
    name = serializers.CharField()
    owner = OwnerSerializer()
    created_at = TimestampField()


def _customer_record(organization: Organization) -> Customer | None:
    try:
        return organization.customer
    except ObjectDoesNotExist:
        return None


def customer_json(organization: Organization) -> dict[str, Any]:
    record = _customer_record(organization)
    owners = [m for m in organization.memberships.all() if m.role == Role.OWNER]
    owner = min(owners, key=lambda m: (m.created_at, m.pk)) if owners else None
    return {
        "id": organization.id,
        "external_id": record.external_id if record else None,
        "name": organization.name,
        "owner": {
            "email": owner.user.email if owner else None,
            "name": record.owner_name if record else "",
        },
        "created_at": _timestamp(organization.created_at),
    }


class LoginLinkSerializer(serializers.Serializer[Any]):
    url = serializers.URLField(help_text="Signs the owner into the panel once, within 60 s.")
    expires_at = TimestampField()


# Plans


class PlanCreateSerializer(Closed):
    name = StrictCharField(max_length=100)
    memory_mb = limit_field("memory_mb")
    disk_mb = limit_field("disk_mb")
    cpu_percent = limit_field("cpu_percent")
    processes = limit_field("processes")
    backups_limit = StrictIntegerField(min_value=0, max_value=1000, required=False, default=0)
    tags = tags_field(required=False, default=list)


class PlanChangeSerializer(Closed):
    name = StrictCharField(max_length=100, required=False)
    memory_mb = limit_field("memory_mb", required=False)
    disk_mb = limit_field("disk_mb", required=False)
    cpu_percent = limit_field("cpu_percent", required=False)
    processes = limit_field("processes", required=False)
    backups_limit = StrictIntegerField(min_value=0, max_value=1000, required=False)
    tags = tags_field(required=False)


class PlanSerializer(serializers.ModelSerializer[Plan]):
    class Meta:
        model = Plan
        fields = [
            "id", "name", "memory_mb", "disk_mb", "cpu_percent", "processes", "backups_limit",
            "tags",
        ]  # fmt: skip


# Servers


class ServerCreateSerializer(Closed):
    # Required, so that a create the billing system retries finds the server it made.
    external_id = external_id_field()
    customer = StrictCharField(max_length=40, help_text="The customer's id (org_...).")
    name = StrictCharField(max_length=100)
    game = StrictCharField(max_length=32)
    plan = StrictCharField(max_length=40, required=False, help_text="A plan's id (pln_...).")
    limits = LimitsSerializer(required=False, help_text="In place of plan.")
    tags = tags_field(required=False, default=list)
    settings = serializers.DictField(
        child=serializers.CharField(max_length=200), required=False, default=dict
    )
    start = serializers.BooleanField(required=False, default=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("plan" in attrs) == ("limits" in attrs):
            raise serializers.ValidationError({"plan": ["Give either plan or limits."]})
        return attrs


class ServerChangeSerializer(Closed):
    name = StrictCharField(max_length=100, required=False)
    plan = StrictCharField(max_length=40, required=False)
    limits = LimitsSerializer(required=False)
    external_id = external_id_field(required=False, allow_null=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "plan" in attrs and "limits" in attrs:
            raise serializers.ValidationError({"plan": ["Give plan or limits, not both."]})
        return attrs


class ServerSerializer(serializers.Serializer[Server]):
    id = serializers.CharField()
    external_id = serializers.CharField(allow_null=True)
    customer = serializers.CharField(help_text="The customer's id (org_...).")
    name = serializers.CharField()
    game = serializers.CharField()
    state = serializers.CharField()
    address = serializers.CharField()
    node = serializers.CharField()
    plan = serializers.CharField(allow_null=True, help_text="The plan's id, or null.")
    limits = LimitsSerializer()
    backups_limit = serializers.IntegerField(
        allow_null=True,
        help_text="How many backups the server keeps (its plan's): a new one beyond it "
        "deletes the oldest; 0, none are made; null, no limit.",
    )
    suspended = serializers.BooleanField()
    pending_restart = serializers.BooleanField(
        help_text="New limits are waiting for the game's next start."
    )
    created_at = TimestampField()


def sold_record(server: Server) -> SoldServer | None:
    try:
        return server.sold
    except ObjectDoesNotExist:
        return None


def server_json(server: Server) -> dict[str, Any]:
    sold = sold_record(server)
    return {
        "id": server.id,
        "external_id": sold.external_id if sold else None,
        "customer": server.organization_id,
        "name": server.name,
        "game": server.game,
        "state": server.state,
        "address": server.address,
        "node": server.node.name,
        "plan": sold.plan_id if sold else None,
        "limits": Limits.of(server).fields(),
        "backups_limit": server.backups_limit,
        "suspended": server.suspended,
        "pending_restart": pending_restart(server, sold.limits_changed_at if sold else None),
        "created_at": _timestamp(server.created_at),
    }


# Nodes


class CapacitySerializer(serializers.Serializer[Any]):
    memory_mb = serializers.IntegerField(allow_null=True)
    disk_mb = serializers.IntegerField(allow_null=True)
    ports = serializers.IntegerField(allow_null=True)


class NodeSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    tags = serializers.ListField(child=serializers.CharField())
    state = serializers.CharField()
    drained = serializers.BooleanField()
    games = serializers.ListField(child=serializers.CharField())
    servers = serializers.IntegerField()
    capacity = CapacitySerializer(help_text="With overallocation; null where not known.")
    committed = CapacitySerializer()
    free = CapacitySerializer()
