"""Shapes of reservations, their quotes and GPU availability."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpurental.api.catalog.serializers import GpuChoiceSerializer, gpu_model_named, image_named
from gpurental.api.fields import (
    AwareDateTimeField,
    CurrencyField,
    amount_field,
    hours_field,
    money_field,
)
from gpurental.billing.pricing import quantize_money
from gpurental.catalog.models import GPUModel, ImageTemplate
from gpurental.rentals.models import Reservation, ReservationEvent
from gpurental.rentals.services.reservations import refund_for


class ReservationEventSerializer(serializers.ModelSerializer):
    at = serializers.DateTimeField(source="created_at", read_only=True)
    # Plain strings, not enums: the schema has one enum per status set (on ``status``).
    from_status = serializers.CharField(read_only=True, help_text="A status, or empty")
    to_status = serializers.CharField(read_only=True, help_text="A status, or empty")

    class Meta:
        model = ReservationEvent
        fields = ["at", "from_status", "to_status", "reason"]


class ReservationSerializer(serializers.ModelSerializer):
    """One shape for list and detail: a second serializer with ``status`` would give the
    schema two names for one enum."""

    gpu_model = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    plan = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    image = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    start = serializers.DateTimeField(read_only=True)
    end = serializers.DateTimeField(read_only=True, help_text="Exclusive")
    price = amount_field(help_text="Paid at booking, at the plan's reserved rate")
    refunded = amount_field(help_text="Paid back on cancellation")
    refund_if_cancelled_now = serializers.SerializerMethodField(
        help_text="What cancelling now would pay back; null once it has started or ended"
    )
    currency = CurrencyField()
    host = serializers.SerializerMethodField(help_text="Where the GPUs are held")
    gpu_indices = serializers.SerializerMethodField(help_text="The GPUs held, on the host")
    instance = serializers.SerializerMethodField(
        help_text="The instance launched for it at the start, if any"
    )
    events = ReservationEventSerializer(many=True, read_only=True)

    class Meta:
        model = Reservation
        fields = [
            "id",
            "status",
            "gpu_model",
            "gpu_count",
            "plan",
            "image",
            "start",
            "end",
            "price",
            "refunded",
            "refund_if_cancelled_now",
            "currency",
            "host",
            "gpu_indices",
            "instance",
            "created_at",
            "cancelled_at",
            "events",
        ]
        read_only_fields = fields

    def _held(self, obj: Reservation) -> list:
        # Prefetched by the view as ``held`` (with gpu and host).
        held = getattr(obj, "held", None)
        if held is None:
            held = list(obj.allocations.select_related("gpu__host"))
        return held

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_host(self, obj: Reservation) -> str | None:
        held = self._held(obj)
        return held[0].gpu.host.name if held else None

    def get_gpu_indices(self, obj: Reservation) -> list[int]:
        return sorted(a.gpu.index for a in self._held(obj))

    @extend_schema_field(serializers.UUIDField(allow_null=True))
    def get_instance(self, obj: Reservation) -> str | None:
        launched = getattr(obj, "launched", None)
        if launched is None:
            launched = list(obj.instances.order_by("-created_at")[:1])
        return str(launched[0].pk) if launched else None

    @extend_schema_field(serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True))
    def get_refund_if_cancelled_now(self, obj: Reservation) -> str | None:
        refund = refund_for(obj, now=self.context.get("now") or timezone.now())
        # A string, as every amount: DRF's JSON encoder would write a bare Decimal as a float.
        return None if refund is None else str(quantize_money(refund))


class ReservationQuoteSerializer(GpuChoiceSerializer):
    """What to book: a plan (or GPU model and count) over [start, end)."""

    start = AwareDateTimeField(help_text="ISO 8601 with a time zone, on a whole minute")
    end = AwareDateTimeField(help_text="Exclusive; ISO 8601 with a time zone")


class ReservationCreateSerializer(ReservationQuoteSerializer):
    image = serializers.CharField(
        max_length=64, help_text="Image slug: what runs on the GPUs from the start"
    )

    def validate_image(self, value: str) -> ImageTemplate:
        return image_named(value)


class ReservationQuoteResultSerializer(serializers.Serializer):
    plan = serializers.CharField(read_only=True)
    gpu_model = serializers.CharField(read_only=True)
    gpu_count = serializers.IntegerField(read_only=True)
    start = serializers.DateTimeField(
        read_only=True, help_text="Priced from here (now at the earliest)"
    )
    end = serializers.DateTimeField(read_only=True)
    hours = hours_field()
    gpu_hours = hours_field()
    rate_kind = serializers.CharField(read_only=True, help_text="Always reserved")
    hourly_rate = money_field(help_text="The plan's reserved rate, per hour for the whole plan")
    discount = serializers.DecimalField(
        max_digits=5, decimal_places=4, read_only=True, help_text="0.15 = 15 % off the hourly rate"
    )
    price = amount_field(help_text="Paid at booking")
    currency = CurrencyField()
    full_refund_until = serializers.DateTimeField(
        read_only=True, help_text="Cancelled by then: refunded in full; later, in part"
    )
    late_refund_percent = serializers.IntegerField(
        read_only=True, help_text="Refunded when cancelled after full_refund_until, before start"
    )


# --- availability -----------------------------------------------------------------


class AvailabilityQuerySerializer(serializers.Serializer):
    gpu_model = serializers.CharField(
        required=False,
        max_length=64,
        help_text="GPU model slug or short name; default: every model with a plan on offer",
    )
    hours = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="How many hours from start; default and most: RESERVATION_HORIZON_DAYS × 24",
    )
    start = AwareDateTimeField(
        required=False, help_text="ISO 8601 with a time zone; default: this hour's start"
    )

    def validate_gpu_model(self, value: str) -> GPUModel:
        return gpu_model_named(value)

    def validate_hours(self, value: int) -> int:
        most = settings.RESERVATION_HORIZON_DAYS * 24
        if value > most:
            raise serializers.ValidationError(
                _("at most %(most)s hours (the booking horizon)") % {"most": most}
            )
        return value

    def validate_start(self, value):
        now = self.context["now"]
        if value < now.replace(minute=0, second=0, microsecond=0):
            raise serializers.ValidationError(_("must not be before the current hour"))
        horizon = settings.RESERVATION_HORIZON_DAYS
        if value > now + timedelta(days=horizon):
            raise serializers.ValidationError(
                _("must be within %(days)s days from now") % {"days": horizon}
            )
        return value


class HourFreeSerializer(serializers.Serializer):
    start = serializers.DateTimeField(read_only=True)
    free = serializers.IntegerField(read_only=True, help_text="GPUs with nothing booked")
    largest_block = serializers.IntegerField(
        read_only=True, help_text="The most free on one host: the largest booking that fits"
    )


class ModelAvailabilitySerializer(serializers.Serializer):
    gpu_model = serializers.CharField(read_only=True, help_text="Slug")
    name = serializers.CharField(read_only=True)
    short_name = serializers.CharField(read_only=True)
    total = serializers.IntegerField(read_only=True, help_text="GPUs on hosts taking bookings")
    hours = HourFreeSerializer(many=True, read_only=True)


class AvailabilitySerializer(serializers.Serializer):
    start = serializers.DateTimeField(read_only=True)
    hours = serializers.IntegerField(read_only=True)
    models = ModelAvailabilitySerializer(many=True, read_only=True)
