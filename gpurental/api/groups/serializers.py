"""Shapes of elastic groups in the API: the apply/quote request, a group, its events, its price.

A group's price is stated before it is created (issue 15): each serving replica costs its
plan's hourly rate (less the off-peak discount inside the window); a warm replica is a
stopped instance that holds no GPU, and costs nothing while it waits.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpurental.api.fields import CurrencyField, LocalTimeField, amount_field, money_field
from gpurental.catalog.models import Plan
from gpurental.gateway import routes
from gpurental.groups.models import Group, GroupEvent, LoadSample
from gpurental.groups.services import Replicas

WARM_REPLICA_NOTE = (
    "Warm replicas are stopped instances: they hold no GPU and are not billed while they "
    "wait. A warm replica is billed at the replica rate from the moment it is promoted."
)
FORMATS = ("json", "yaml", "hcl")
RECENT_EVENTS = 20
# The source article's example, as written: the API's example and the console's first spec.
EXAMPLE_HCL = """resource "elastic_gpu" "inference" {
  min_nodes     = 1
  max_nodes     = 10
  scaling_metrics {
    metric = "gpu_utilization"
    threshold = 70
  }
  warm_pool {
    size = 2
    instance_type = "A10"
  }
}
"""


# --- requests -----------------------------------------------------------------


class GroupSourceSerializer(serializers.Serializer):
    """A spec as text, in the format it was written in."""

    format = serializers.ChoiceField(choices=FORMATS, required=False, allow_null=True)
    source = serializers.CharField(
        trim_whitespace=False, max_length=100_000, help_text="The spec: JSON, YAML or HCL text"
    )


# --- price --------------------------------------------------------------------


def group_price(plan: Plan, *, min_replicas: int, max_replicas: int, warm_pool_size: int) -> dict:
    """What a group costs per hour: a pure calculation on the plan's rates (no ORM)."""
    rate = plan.hourly_rate
    return {
        "plan": plan.slug,
        "gpu_count": plan.gpu_count,
        "replica_hourly_rate": rate,
        "replica_off_peak_rate": plan.off_peak_rate,
        "off_peak_discount": plan.off_peak_discount,
        "off_peak_start": plan.off_peak_start,
        "off_peak_end": plan.off_peak_end,
        "warm_replica_hourly_rate": Decimal("0.00"),
        "warm_replica_note": WARM_REPLICA_NOTE,
        "min_replicas": min_replicas,
        "max_replicas": max_replicas,
        "warm_pool_size": warm_pool_size,
        "min_hourly": rate * min_replicas,
        "max_hourly": rate * max_replicas,
        "warm_pool_hourly": Decimal("0.00"),
    }


class GroupPriceSerializer(serializers.Serializer):
    plan = serializers.CharField(read_only=True)
    gpu_count = serializers.IntegerField(read_only=True, help_text="GPUs per replica")
    replica_hourly_rate = money_field(help_text="Per serving replica per hour (the plan's rate)")
    replica_off_peak_rate = money_field(
        help_text="Per serving replica per hour in the off-peak window"
    )
    off_peak_discount = serializers.DecimalField(
        max_digits=5, decimal_places=4, read_only=True, help_text="0.30 = 30 % off"
    )
    off_peak_start = LocalTimeField(read_only=True, help_text="In the operator's time zone")
    off_peak_end = LocalTimeField(read_only=True, help_text="In the operator's time zone")
    warm_replica_hourly_rate = serializers.DecimalField(
        max_digits=14,
        decimal_places=2,
        rounding=ROUND_HALF_UP,
        read_only=True,
        help_text="Always 0.00: see warm_replica_note",
    )
    warm_replica_note = serializers.CharField(read_only=True)
    min_replicas = serializers.IntegerField(read_only=True)
    max_replicas = serializers.IntegerField(read_only=True)
    warm_pool_size = serializers.IntegerField(read_only=True)
    min_hourly = money_field(help_text="Per hour at min_nodes serving replicas (full rate)")
    max_hourly = money_field(help_text="Per hour at max_nodes serving replicas (full rate)")
    warm_pool_hourly = amount_field(help_text="Per hour for the whole warm pool: 0.00")
    currency = CurrencyField()


# --- a group --------------------------------------------------------------------


class GroupEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = GroupEvent
        fields = ["id", "kind", "from_replicas", "to_replicas", "reason", "created_at"]


class LoadSampleSerializer(serializers.ModelSerializer):
    class Meta:
        model = LoadSample
        fields = [
            "at",
            "ready",
            "provisioning",
            "warm",
            "rps",
            "inflight",
            "queued",
            "latency_p50_ms",
            "latency_p99_ms",
            "errors",
            "gpu_util",
            "needed",
        ]


class ReplicaSerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    status = serializers.CharField(read_only=True)
    role = serializers.CharField(
        read_only=True, help_text="serving, draining or warm (a stopped replica held ready)"
    )
    host = serializers.CharField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(read_only=True)


def replica_rows(group: Group) -> list[dict]:
    """The group's live replicas, serving first, then draining, warm, and broken ones."""
    return [
        {
            "id": r.pk,
            "status": r.status,
            "role": r.group_role,
            "host": r.host.name if r.host_id else None,
            "created_at": r.created_at,
        }
        for r in Replicas.of(group).in_page_order()
    ]


class GroupSerializer(serializers.ModelSerializer):
    image = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    plan = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    # A plain string in the schema: "status" enums of other resources would collide.
    status = serializers.CharField(
        read_only=True, help_text="active, deleting (replicas terminating) or deleted"
    )
    instance_type = serializers.CharField(source="plan.gpu_model.short_name", read_only=True)
    gpu_count = serializers.IntegerField(source="plan.gpu_count", read_only=True)
    min_nodes = serializers.IntegerField(source="min_replicas", read_only=True)
    max_nodes = serializers.IntegerField(source="max_replicas", read_only=True)
    endpoint_url = serializers.SerializerMethodField(
        help_text="Send requests here with 'Authorization: Bearer <API key or endpoint key>'"
    )

    class Meta:
        model = Group
        fields = [
            "id",
            "name",
            "status",
            "image",
            "plan",
            "instance_type",
            "gpu_count",
            "port",
            "min_nodes",
            "max_nodes",
            "desired_replicas",
            "warm_pool_size",
            "endpoint_url",
            "created_at",
        ]

    def get_endpoint_url(self, obj: Group) -> str:
        return routes.group_origin(obj.pk)


class GroupDetailSerializer(GroupSerializer):
    spec = serializers.JSONField(read_only=True, help_text="The spec as last applied, normalised")
    replicas = serializers.SerializerMethodField()
    load = serializers.SerializerMethodField(help_text="The autoscaler's latest look (or null)")
    events = serializers.SerializerMethodField(help_text=f"The last {RECENT_EVENTS}, newest first")
    price = serializers.SerializerMethodField()

    class Meta(GroupSerializer.Meta):
        fields = [*GroupSerializer.Meta.fields, "spec", "replicas", "load", "events", "price"]

    @extend_schema_field(ReplicaSerializer(many=True))
    def get_replicas(self, obj: Group) -> list:
        return ReplicaSerializer(replica_rows(obj), many=True).data

    @extend_schema_field(LoadSampleSerializer(allow_null=True))
    def get_load(self, obj: Group):
        sample = obj.samples.order_by("-at").first()
        return LoadSampleSerializer(sample).data if sample else None

    @extend_schema_field(GroupEventSerializer(many=True))
    def get_events(self, obj: Group) -> list:
        events = obj.events.order_by("-created_at", "-id")[:RECENT_EVENTS]
        return GroupEventSerializer(events, many=True).data

    @extend_schema_field(GroupPriceSerializer)
    def get_price(self, obj: Group) -> dict:
        price = group_price(
            obj.plan,
            min_replicas=obj.min_replicas,
            max_replicas=obj.max_replicas,
            warm_pool_size=obj.warm_pool_size,
        )
        return GroupPriceSerializer(price).data


class GroupAppliedSerializer(GroupDetailSerializer):
    """The answer to an apply: the group, whether it was created, and what changed."""

    created = serializers.BooleanField(read_only=True)
    changes = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text='["created"], each changed setting "key: old → new", or [] (unchanged)',
    )
    endpoint_key = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The group's endpoint key: shown once, when the group is created (else null)",
    )

    class Meta(GroupDetailSerializer.Meta):
        fields = [*GroupDetailSerializer.Meta.fields, "created", "changes", "endpoint_key"]


class GroupQuoteSerializer(serializers.Serializer):
    """What applying this spec would make, and its price; nothing is created."""

    name = serializers.CharField(read_only=True)
    exists = serializers.BooleanField(
        read_only=True, help_text="You have a live group of this name: apply would change it"
    )
    image = serializers.CharField(read_only=True)
    instance_type = serializers.CharField(read_only=True)
    port = serializers.IntegerField(read_only=True)
    spec = serializers.JSONField(read_only=True, help_text="The spec, checked and normalised")
    price = GroupPriceSerializer(read_only=True)


class EndpointKeyRotateSerializer(serializers.Serializer):
    overlap_s = serializers.IntegerField(
        required=False,
        default=24 * 3600,
        min_value=0,
        help_text="How long the current key keeps working beside the new one, in seconds "
        "(default 86400, one day; 0: it stops now; at most 30 days)",
    )


class EndpointKeyRotatedSerializer(serializers.Serializer):
    endpoint_key = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The new endpoint key: shown this once (null in a replayed answer)",
    )
    previous_key_until = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="Until when the replaced key still opens the endpoint (null: no more)",
    )
