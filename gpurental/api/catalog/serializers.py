"""Shapes of the catalog (GPU models, plans, images), and the resolvers of their names
that launches and bookings share: a name the catalog does not know is a 400 listing
the ones it does."""

from __future__ import annotations

from django.db.models import Q
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpurental.api.fields import CurrencyField, LocalTimeField, StorageMonthlyField, money_field
from gpurental.catalog.models import GPUModel, ImageTemplate, Plan
from gpurental.catalog.selectors import ResolvedImage, image_names_offered, image_resolve
from gpurental.images.services import ImageRefused, custom_image_resolved
from gpurental.rentals.selectors import free_gpus, zone_availability
from gpurental.storage.models import StoredKind


def _slug() -> serializers.CharField:
    # Not a SlugField in the schema: catalog slugs may hold dots ("pytorch-2.1").
    return serializers.CharField(read_only=True)


class ZoneFreeSerializer(serializers.Serializer):
    zone = serializers.CharField()
    region = serializers.CharField()
    label = serializers.CharField()
    gpus_free = serializers.IntegerField(help_text="Free now on its hosts that take launches")
    gpus_total = serializers.IntegerField(help_text="Enabled on its active hosts")


class GPUModelSerializer(serializers.ModelSerializer):
    slug = _slug()
    gpus_total = serializers.IntegerField(read_only=True, help_text="Enabled GPUs in the fleet")
    gpus_free = serializers.SerializerMethodField(
        help_text="GPUs free right now on hosts that take new launches"
    )
    zones = serializers.SerializerMethodField(
        help_text="The same per zone (launch with `zone` to pick one); empty when no host "
        "is in a zone"
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
            "zones",
        ]

    def _free(self, obj: GPUModel):
        """``free_gpus`` of this model, read once for both fields."""
        cache = self.context.setdefault("free_gpus", {})
        if obj.pk not in cache:
            cache[obj.pk] = free_gpus(gpu_model=obj, now=self.context["now"])
        return cache[obj.pk]

    @extend_schema_field(ZoneFreeSerializer(many=True))
    def get_zones(self, obj: GPUModel) -> list[dict]:
        zones = zone_availability(gpu_model=obj, now=self.context["now"], free=self._free(obj))
        return ZoneFreeSerializer(zones, many=True).data

    def get_gpus_free(self, obj: GPUModel) -> int:
        return sum(len(host.free) for host in self._free(obj))


class PlanSerializer(serializers.ModelSerializer):
    slug = _slug()
    gpu_model = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    hourly_rate = money_field(help_text="Price per hour for the whole plan")
    off_peak_rate = money_field(help_text="Hourly price inside the off-peak window")
    reserved_rate = money_field(help_text="Hourly price of booked (reserved) capacity")
    no_gpu_hourly_rate = money_field(
        help_text="Hourly price of a stopped instance of this plan started without its GPUs "
        "(no-GPU mode), to reach its data while the GPUs are taken"
    )
    off_peak_start = LocalTimeField(read_only=True, help_text="In the operator's time zone")
    off_peak_end = LocalTimeField(read_only=True, help_text="In the operator's time zone")
    stopped_monthly = StorageMonthlyField(
        StoredKind.WORKSPACE,
        lambda plan: plan.disk_gb,
        help_text="What the workspace (disk_gb) of a stopped instance costs a month (730 h)",
    )
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
            "no_gpu_hourly_rate",
            "stopped_monthly",
            "currency",
        ]


class ImageSerializer(serializers.ModelSerializer):
    slug = _slug()
    aliases = serializers.SlugRelatedField(
        slug_field="name",
        many=True,
        read_only=True,
        help_text="Other names a launch may use for this image (pytorch-2.1)",
    )

    class Meta:
        model = ImageTemplate
        fields = ["slug", "name", "framework", "cuda_version", "description", "port", "aliases"]
        extra_kwargs = {
            "cuda_version": {
                "help_text": "The CUDA release the image is built for ('' for none): it runs "
                "on hosts whose NVIDIA driver supports this release or newer"
            }
        }

    framework = serializers.CharField(
        read_only=True, help_text="The framework: the slug's name part (pytorch, tensorflow, cuda)"
    )


def _choices(values) -> str:
    return ", ".join(values) or _("none")


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
            _("%(value)r matches several GPU models; use a slug: %(slugs)s")
            % {"value": value, "slugs": _choices(sorted(m.slug for m in matches))}
        )
    known = [f"{m.slug} ({m.short_name})" for m in GPUModel.objects.order_by("slug")]
    raise serializers.ValidationError(
        _("unknown GPU model %(value)r; choose one of: %(known)s")
        % {"value": value, "known": _choices(known)}
    )


def image_resolved(value: str) -> ResolvedImage:
    """The template a slug or an alias names (``catalog.selectors.image_resolve``)."""
    resolved = image_resolve(value)
    if resolved is None:
        raise serializers.ValidationError(
            _("unknown image %(value)r; choose one of: %(known)s")
            % {"value": value, "known": _choices(image_names_offered())}
        )
    return resolved


def launch_image_resolved(value: str, *, account=None) -> ResolvedImage:
    """A catalog image (slug or alias), or a customer's own image reference: anything with
    a ``/``, ``:`` or ``@`` that is not a catalog name (``images.services``); on the
    platform's registry, one of ``account``'s saved images."""
    if image_resolve(value) is not None or not any(c in value for c in "/:@"):
        try:
            return image_resolved(value)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError(
                _("%(error)s; or an image reference such as registry.example.com/team/image:tag")
                % {"error": exc.detail[0]}
            ) from exc
    try:
        return custom_image_resolved(value, account=account)
    except ImageRefused as exc:
        raise serializers.ValidationError(exc.message) from exc


def image_named(value: str) -> ImageTemplate:
    return image_resolved(value).template


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
                _("unknown plan %(value)r; choose one of: %(known)s")
                % {"value": value, "known": _choices(offered.values_list("slug", flat=True))}
            )
        return plan

    def validate(self, attrs: dict) -> dict:
        if "plan" in attrs:
            for other in ("gpu_model", "gpu_count"):
                if other in attrs:
                    raise serializers.ValidationError(
                        {
                            other: [
                                _("a plan fixes the GPU model and count; send plan or %(field)s")
                                % {"field": other}
                            ]
                        }
                    )
        elif "gpu_model" not in attrs:
            raise serializers.ValidationError(
                {"gpu_model": [_("send a gpu_model (with a gpu_count) or a plan")]}
            )
        return attrs

    def plan_kwargs(self) -> dict:
        data = self.validated_data
        return {
            "plan": data.get("plan"),
            "gpu_model": data.get("gpu_model"),
            "gpu_count": data.get("gpu_count"),
        }
