"""Shapes of the API's resources. Money is a string (DecimalField), never a float."""

from __future__ import annotations

from datetime import UTC, timedelta
from decimal import ROUND_HALF_UP

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpurental.accounts.models import ApiKey
from gpurental.billing.models import Invoice, InvoiceLine
from gpurental.billing.pricing import local_month, quantize_money
from gpurental.billing.selectors import operator_zone
from gpurental.catalog.models import GPUModel, ImageTemplate, Plan
from gpurental.rentals.models import (
    Instance,
    InstanceEvent,
    InstanceStatus,
    Reservation,
    ReservationEvent,
)
from gpurental.rentals.selectors import HELD, free_gpus
from gpurental.rentals.services.reservations import refund_for

MODEL_REPOS = ["huggingface"]


class CurrencyField(serializers.ReadOnlyField):
    def __init__(self, **kwargs):
        kwargs.setdefault("help_text", "ISO 4217 code of every amount in this response")
        super().__init__(source="*", **kwargs)

    def to_representation(self, value) -> str:
        return settings.BILLING_CURRENCY


extend_schema_field(OpenApiTypes.STR)(CurrencyField)


@extend_schema_field(
    {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]:[0-5][0-9]$", "example": "08:00:00"}
)
class LocalTimeField(serializers.TimeField):
    """A time of day in the operator's time zone (``TIME_ZONE``): HH:MM:SS, no offset."""


def _slug() -> serializers.CharField:
    # Not a SlugField in the schema: catalog slugs may hold dots ("pytorch-2.1").
    return serializers.CharField(read_only=True)


def _money(**kwargs) -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=14, decimal_places=4, rounding=ROUND_HALF_UP, read_only=True, **kwargs
    )


# --- catalog ------------------------------------------------------------------


class GPUModelSerializer(serializers.ModelSerializer):
    slug = _slug()
    gpus_total = serializers.IntegerField(read_only=True, help_text="Enabled GPUs in the fleet")
    gpus_free = serializers.SerializerMethodField(
        help_text="GPUs free right now on hosts that take new launches"
    )

    class Meta:
        model = GPUModel
        fields = [
            "slug",
            "name",
            "short_name",
            "memory_gb",
            "fp16_tflops",
            "bf16_tflops",
            "fp32_tflops",
            "memory_bandwidth_gbs",
            "interconnect",
            "nvlink_bandwidth_gbs",
            "gpus_total",
            "gpus_free",
        ]

    def get_gpus_free(self, obj: GPUModel) -> int:
        hosts = free_gpus(gpu_model=obj, now=self.context["now"])
        return sum(len(host.free) for host in hosts)


class PlanSerializer(serializers.ModelSerializer):
    slug = _slug()
    gpu_model = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    hourly_rate = _money(help_text="Price per hour for the whole plan")
    off_peak_rate = _money(help_text="Hourly price inside the off-peak window")
    reserved_rate = _money(help_text="Hourly price of booked (reserved) capacity")
    off_peak_start = LocalTimeField(read_only=True, help_text="In the operator's time zone")
    off_peak_end = LocalTimeField(read_only=True, help_text="In the operator's time zone")
    currency = CurrencyField()

    class Meta:
        model = Plan
        fields = [
            "slug",
            "name",
            "gpu_model",
            "gpu_count",
            "vcpus",
            "memory_gb",
            "disk_gb",
            "hourly_rate",
            "off_peak_discount",
            "off_peak_start",
            "off_peak_end",
            "off_peak_rate",
            "reserved_discount",
            "reserved_rate",
            "currency",
        ]


class ImageSerializer(serializers.ModelSerializer):
    slug = _slug()

    class Meta:
        model = ImageTemplate
        fields = ["slug", "name", "description", "port"]


# --- instances ----------------------------------------------------------------


class InstanceEventSerializer(serializers.ModelSerializer):
    at = serializers.DateTimeField(source="created_at", read_only=True)

    class Meta:
        model = InstanceEvent
        fields = ["at", "kind", "from_status", "to_status", "step", "reason"]


class InstanceSerializer(serializers.ModelSerializer):
    gpu_model = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    plan = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    image = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    host = serializers.SlugRelatedField(slug_field="name", read_only=True)
    gpu_indices = serializers.SerializerMethodField(help_text="GPUs held now, on the host")
    jupyter_url = serializers.SerializerMethodField(
        help_text="JupyterLab, with its token: only for the owner, and only while running"
    )

    class Meta:
        model = Instance
        fields = [
            "id",
            "name",
            "status",
            "status_reason",
            "gpu_model",
            "gpu_count",
            "plan",
            "image",
            "host",
            "gpu_indices",
            "created_at",
            "running_since",
            "stopped_at",
            "jupyter_url",
        ]

    def get_gpu_indices(self, obj: Instance) -> list[int]:
        # Prefetched by the view as ``held_allocations``: the open-ended allocations,
        # the same rule as rentals.selectors.instance_gpus.
        held = getattr(obj, "held_allocations", None)
        if held is None:
            held = obj.allocations.filter(HELD).select_related("gpu")
        return sorted(a.gpu.index for a in held)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_jupyter_url(self, obj: Instance) -> str | None:
        request = self.context.get("request")
        is_owner = request is not None and request.user.pk == obj.user_id
        if not is_owner or obj.status != InstanceStatus.RUNNING:
            return None
        if obj.host is None or not obj.jupyter_port or not obj.jupyter_token:
            return None
        address = obj.host.address
        if ":" in address and not address.startswith("["):
            address = f"[{address}]"  # IPv6
        return f"http://{address}:{obj.jupyter_port}/lab?token={obj.jupyter_token}"


class InstanceDetailSerializer(InstanceSerializer):
    events = InstanceEventSerializer(many=True, read_only=True)

    class Meta(InstanceSerializer.Meta):
        fields = [*InstanceSerializer.Meta.fields, "events"]


class InstanceListQuerySerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=InstanceStatus.choices,
        required=False,
        help_text="Only instances in this status",
        error_messages={
            "invalid_choice": "{input!r} is not an instance status; choose one of: "
            + ", ".join(InstanceStatus.values)
        },
    )


def _choices(values) -> str:
    return ", ".join(values) or "none"


def gpu_model_named(value: str) -> GPUModel:
    """The GPU model with this slug or short name, any case; else a ValidationError."""
    matches = list(GPUModel.objects.filter(Q(slug__iexact=value) | Q(short_name__iexact=value)))
    by_slug = [m for m in matches if m.slug.lower() == value.lower()]
    if by_slug:
        return by_slug[0]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise serializers.ValidationError(
            f"{value!r} matches several GPU models; use a slug: "
            + _choices(sorted(m.slug for m in matches))
        )
    known = [f"{m.slug} ({m.short_name})" for m in GPUModel.objects.order_by("slug")]
    raise serializers.ValidationError(
        f"unknown GPU model {value!r}; choose one of: {_choices(known)}"
    )


def _image_named(value: str) -> ImageTemplate:
    image = ImageTemplate.objects.filter(slug=value).first()
    if image is None:
        offered = ImageTemplate.objects.filter(is_active=True).order_by("slug")
        raise serializers.ValidationError(
            f"unknown image {value!r}; choose one of: "
            + _choices(offered.values_list("slug", flat=True))
        )
    return image


class GpuChoiceSerializer(serializers.Serializer):
    """Either ``plan``, or ``gpu_model`` (+ ``gpu_count``): what instances and
    reservations are made of."""

    gpu_model = serializers.CharField(
        required=False,
        max_length=64,
        help_text="GPU model slug or short name, any case (e.g. A10G)",
    )
    gpu_count = serializers.IntegerField(
        required=False, min_value=1, max_value=64, help_text="With gpu_model; default 1"
    )
    plan = serializers.CharField(
        required=False, max_length=64, help_text="Plan slug; fixes the GPU model and count"
    )

    def validate_gpu_model(self, value: str) -> GPUModel:
        return gpu_model_named(value)

    def validate_plan(self, value: str) -> Plan:
        plan = Plan.objects.select_related("gpu_model").filter(slug=value).first()
        if plan is None:
            offered = Plan.objects.filter(is_active=True).order_by("slug")
            raise serializers.ValidationError(
                f"unknown plan {value!r}; choose one of: "
                + _choices(offered.values_list("slug", flat=True))
            )
        return plan

    def validate(self, attrs: dict) -> dict:
        if "plan" in attrs:
            for other in ("gpu_model", "gpu_count"):
                if other in attrs:
                    raise serializers.ValidationError(
                        {other: [f"a plan fixes the GPU model and count; send plan or {other}"]}
                    )
        elif "gpu_model" not in attrs:
            raise serializers.ValidationError(
                {"gpu_model": ["send a gpu_model (with a gpu_count) or a plan"]}
            )
        return attrs

    def plan_kwargs(self) -> dict:
        data = self.validated_data
        return {
            "plan": data.get("plan"),
            "gpu_model": data.get("gpu_model"),
            "gpu_count": data.get("gpu_count"),
        }


class InstanceCreateSerializer(GpuChoiceSerializer):
    """Either ``plan``, or ``gpu_model`` (+ ``gpu_count``); and an ``image``."""

    image = serializers.CharField(max_length=64, help_text="Image slug")
    name = serializers.CharField(required=False, allow_blank=True, max_length=100, default="")
    model_repo = serializers.ChoiceField(
        choices=MODEL_REPOS,
        required=False,
        allow_null=True,
        help_text="huggingface: mount the host's shared Hugging Face model cache read-only",
        error_messages={
            "invalid_choice": "{input!r} is not supported; the only model_repo is 'huggingface'"
        },
    )

    def validate_image(self, value: str) -> ImageTemplate:
        return _image_named(value)

    def launch_kwargs(self) -> dict:
        data = self.validated_data
        return {
            **self.plan_kwargs(),
            "image": data["image"],
            "name": data.get("name", ""),
            "mount_model_cache": data.get("model_repo") == "huggingface",
        }


# --- reservations ---------------------------------------------------------------


def _amount(**kwargs) -> serializers.DecimalField:
    """An amount of money as invoiced: to the cent."""
    return serializers.DecimalField(
        max_digits=14, decimal_places=2, rounding=ROUND_HALF_UP, read_only=True, **kwargs
    )


def _hours(**kwargs) -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=14, decimal_places=4, rounding=ROUND_HALF_UP, read_only=True, **kwargs
    )


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 instant with its offset: a bare wall-clock time is refused, not guessed."""

    default_error_messages = {
        "naive": "add a time zone: e.g. 2026-12-03T10:00Z or 2026-12-03T11:00+01:00",
    }

    def __init__(self, **kwargs):
        # In UTC, not the current time zone: the services word their messages in UTC.
        kwargs.setdefault("default_timezone", UTC)
        super().__init__(**kwargs)

    def enforce_timezone(self, value):
        if timezone.is_naive(value):
            self.fail("naive")
        return super().enforce_timezone(value)  # out of range after conversion: "overflow"


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
    price = _amount(help_text="Paid at booking, at the plan's reserved rate")
    refunded = _amount(help_text="Paid back on cancellation")
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
        return _image_named(value)


class ReservationQuoteResultSerializer(serializers.Serializer):
    plan = serializers.CharField(read_only=True)
    gpu_model = serializers.CharField(read_only=True)
    gpu_count = serializers.IntegerField(read_only=True)
    start = serializers.DateTimeField(
        read_only=True, help_text="Priced from here (now at the earliest)"
    )
    end = serializers.DateTimeField(read_only=True)
    hours = _hours()
    gpu_hours = _hours()
    rate_kind = serializers.CharField(read_only=True, help_text="Always reserved")
    hourly_rate = _money(help_text="The plan's reserved rate, per hour for the whole plan")
    discount = serializers.DecimalField(
        max_digits=5, decimal_places=4, read_only=True, help_text="0.15 = 15 % off the hourly rate"
    )
    price = _amount(help_text="Paid at booking")
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
            raise serializers.ValidationError(f"at most {most} hours (the booking horizon)")
        return value

    def validate_start(self, value):
        now = self.context["now"]
        if value < now.replace(minute=0, second=0, microsecond=0):
            raise serializers.ValidationError("must not be before the current hour")
        horizon = settings.RESERVATION_HORIZON_DAYS
        if value > now + timedelta(days=horizon):
            raise serializers.ValidationError(f"must be within {horizon} days from now")
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


# --- billing ------------------------------------------------------------------------


class MonthQuerySerializer(serializers.Serializer):
    month = serializers.RegexField(
        r"^[0-9]{4}-[0-9]{2}$",
        required=False,
        help_text="YYYY-MM; default: this month in the operator's time zone",
        error_messages={"invalid": "use YYYY-MM, e.g. 2026-10"},
    )

    def validate_month(self, value: str) -> str:
        try:
            year, month = int(value[:4]), int(value[5:])
            local_month(year, month, operator_zone())
        except (ValueError, OverflowError):
            raise serializers.ValidationError("no such month; use YYYY-MM, e.g. 2026-10") from None
        return value

    def year_month(self) -> tuple[int, int]:
        value = self.validated_data.get("month")
        if not value:
            today = timezone.now().astimezone(operator_zone())
            return today.year, today.month
        return int(value[:4]), int(value[5:])


class UsageRowSerializer(serializers.Serializer):
    day = serializers.DateField(read_only=True, help_text="In the operator's time zone")
    instance_id = serializers.CharField(read_only=True)
    instance_name = serializers.CharField(read_only=True)
    plan = serializers.CharField(read_only=True)
    gpu_hours = _hours()
    cost = _amount()


class UsageTotalsSerializer(serializers.Serializer):
    gpu_hours = _hours()
    cost = _amount(help_text="The exact costs added up, then rounded once")


class UsageSerializer(serializers.Serializer):
    month = serializers.CharField(read_only=True, help_text="YYYY-MM")
    start = serializers.DateTimeField(read_only=True)
    end = serializers.DateTimeField(read_only=True, help_text="Exclusive")
    currency = CurrencyField()
    rows = UsageRowSerializer(many=True, read_only=True)
    totals = UsageTotalsSerializer(read_only=True)


class InvoiceLineSerializer(serializers.ModelSerializer):
    instance = serializers.UUIDField(source="instance_id", read_only=True, allow_null=True)
    reservation = serializers.UUIDField(source="reservation_id", read_only=True, allow_null=True)
    gpu_hours = _hours()
    amount = _amount()

    class Meta:
        model = InvoiceLine
        fields = ["description", "instance", "reservation", "rate_kind", "gpu_hours", "amount"]
        read_only_fields = fields


class InvoiceSerializer(serializers.ModelSerializer):
    """One shape for list and detail (see ReservationSerializer): lines included."""

    # A plain string: ``kind`` is an enum of instance events already.
    kind = serializers.CharField(read_only=True, help_text="invoice or credit_note")
    corrects = serializers.SlugRelatedField(
        slug_field="number", read_only=True, help_text="The invoice a credit note corrects"
    )
    period_end = serializers.DateField(read_only=True, help_text="Exclusive")
    total = _amount()
    lines = InvoiceLineSerializer(many=True, read_only=True)

    class Meta:
        model = Invoice
        fields = [
            "id",
            "number",
            "kind",
            "status",
            "period_start",
            "period_end",
            "currency",
            "total",
            "corrects",
            "issued_at",
            "paid_at",
            "voided_at",
            "lines",
        ]
        read_only_fields = fields


# --- account ------------------------------------------------------------------


class ApiKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiKey
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class ApiKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=100, required=False, allow_blank=True, default="", help_text="What it is for"
    )


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The key itself, shown once: store it now. Null in a replayed answer.",
    )

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]
        read_only_fields = fields


class MeSerializer(serializers.Serializer):
    email = serializers.EmailField(read_only=True)
    full_name = serializers.CharField(read_only=True)
    balance = serializers.DecimalField(
        max_digits=16, decimal_places=2, rounding=ROUND_HALF_UP, read_only=True
    )
    currency = CurrencyField()
    gpu_quota = serializers.IntegerField(read_only=True, help_text="GPUs you may hold at once")
    gpus_in_use = serializers.IntegerField(read_only=True)
    credit_limit = serializers.DecimalField(max_digits=12, decimal_places=2, read_only=True)
    hourly_burn = _money(help_text="What your running on-demand instances cost per hour")
    hours_left = serializers.DecimalField(
        max_digits=16,
        decimal_places=1,
        rounding=ROUND_HALF_UP,
        read_only=True,
        allow_null=True,
        help_text="Hours balance and credit last at hourly_burn; null when nothing runs",
    )
    low_balance = serializers.BooleanField(
        read_only=True,
        help_text="Nothing left to spend, or less than BILLING_LOW_BALANCE_HOURS at this burn",
    )
    is_staff = serializers.BooleanField(read_only=True)
