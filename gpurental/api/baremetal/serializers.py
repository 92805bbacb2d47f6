"""Shapes of dedicated-host plans and leases (gpurental/baremetal/)."""

from __future__ import annotations

from django.core.validators import ProhibitNullCharactersValidator
from rest_framework import serializers

from gpurental.api.catalog.serializers import image_named
from gpurental.api.fields import AwareDateTimeField, CurrencyField, amount_field
from gpurental.baremetal import selectors
from gpurental.baremetal.models import DedicatedPlan, Lease, LeaseEvent


class DedicatedPlanSerializer(serializers.ModelSerializer):
    gpu_model = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    rates = serializers.SerializerMethodField(
        help_text="Per hour for the whole host: peak, off_peak (in the window), reserved "
        "(booked ahead)"
    )
    currency = CurrencyField()

    class Meta:
        model = DedicatedPlan
        fields = [
            "slug",
            "name",
            "gpu_model",
            "gpu_count",
            "vcpus",
            "memory_gb",
            "hourly_rate",
            "off_peak_discount",
            "off_peak_start",
            "off_peak_end",
            "reserved_discount",
            "rates",
            "currency",
        ]

    def get_rates(self, obj) -> dict[str, str]:
        return {kind: str(rate) for kind, rate in selectors.hourly_rates(obj).items()}


class LeaseEventSerializer(serializers.ModelSerializer):
    at = serializers.DateTimeField(source="created_at", read_only=True)
    from_status = serializers.CharField(read_only=True)
    to_status = serializers.CharField(read_only=True)

    class Meta:
        model = LeaseEvent
        fields = ["at", "from_status", "to_status", "reason"]


class LeaseSerializer(serializers.ModelSerializer):
    plan = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    host = serializers.SlugRelatedField(slug_field="name", read_only=True)
    start = serializers.DateTimeField(read_only=True)
    end = serializers.DateTimeField(read_only=True, help_text="Exclusive")
    charged = amount_field(
        source="charged_so_far", help_text="Billed so far, per second up to billed_until"
    )
    currency = CurrencyField()
    instance = serializers.SerializerMethodField(help_text="The instance launched into it")
    events = LeaseEventSerializer(many=True, read_only=True)

    class Meta:
        model = Lease
        fields = [
            "id",
            "plan",
            "host",
            "status",
            "reserved",
            "host_network",
            "start",
            "end",
            "billed_until",
            "charged",
            "currency",
            "instance",
            "created_at",
            "events",
        ]

    def get_instance(self, obj) -> str | None:
        instance = obj.instances.order_by("-created_at").first()
        return str(instance.pk) if instance else None


class _SlugField(serializers.SlugRelatedField):
    """By slug; a NUL character is refused here, as DRF's CharField does, before the query
    (PostgreSQL refuses one in a text parameter: it would be a 500)."""

    def to_internal_value(self, data):
        if isinstance(data, str) and "\x00" in data:
            validator = ProhibitNullCharactersValidator()
            raise serializers.ValidationError(validator.message, code=validator.code)
        return super().to_internal_value(data)


class LeaseCreateSerializer(serializers.Serializer):
    plan = _SlugField(slug_field="slug", queryset=DedicatedPlan.objects.filter(is_active=True))
    start = AwareDateTimeField(
        required=False, help_text="Omit to start now (on-demand rate); later = reserved rate"
    )
    end = AwareDateTimeField()
    host_network = serializers.BooleanField(
        default=False, help_text="Only on hosts whose operator allows it"
    )


class LeaseLaunchSerializer(serializers.Serializer):
    image = serializers.CharField(help_text="An image slug, e.g. pytorch-2.1")

    def validate_image(self, value):
        return image_named(value)
