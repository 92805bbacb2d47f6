"""Shapes of the API's resources. Money is a string (DecimalField), never a float."""

from __future__ import annotations

from decimal import ROUND_HALF_UP

from django.db.models import Q
from django.utils import timezone
from django.utils.text import format_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpurental.accounts.models import ApiKey, ApiKeyScope
from gpurental.api.fields import CurrencyField, LocalTimeField, money_field
from gpurental.catalog.models import GPUModel, ImageTemplate, Plan
from gpurental.catalog.selectors import ResolvedImage, image_names_offered, image_resolve
from gpurental.gateway import routes
from gpurental.gateway.sshroutes import ssh_access
from gpurental.modelcache.selectors import host_has_model
from gpurental.rentals.models import (
    Instance,
    InstanceEvent,
    InstanceStatus,
)
from gpurental.rentals.selectors import HELD, free_gpus
from gpurental.teams import roles
from gpurental.teams.acting import account_of, role_refusal
from gpurental.telemetry.selectors import instance_usage

MODEL_REPOS = ["huggingface"]

# DRF fills in {input} when it raises; the list of statuses is appended as it is (codes).
STATUS_CHOICE_ERROR = format_lazy(
    "{} {}",
    gettext_lazy("{input!r} is not an instance status; choose one of:"),
    ", ".join(InstanceStatus.values),
)


def _slug() -> serializers.CharField:
    # Not a SlugField in the schema: catalog slugs may hold dots ("pytorch-2.1").
    return serializers.CharField(read_only=True)


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
    hourly_rate = money_field(help_text="Price per hour for the whole plan")
    off_peak_rate = money_field(help_text="Hourly price inside the off-peak window")
    reserved_rate = money_field(help_text="Hourly price of booked (reserved) capacity")
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
    aliases = serializers.SlugRelatedField(
        slug_field="name",
        many=True,
        read_only=True,
        help_text="Other names a launch may use for this image (pytorch-2.1)",
    )

    class Meta:
        model = ImageTemplate
        fields = ["slug", "name", "description", "port", "aliases"]


# --- instances ----------------------------------------------------------------


class InstanceEventSerializer(serializers.ModelSerializer):
    at = serializers.DateTimeField(source="created_at", read_only=True)

    class Meta:
        model = InstanceEvent
        fields = ["at", "kind", "from_status", "to_status", "step", "reason"]


class SSHAccessSerializer(serializers.Serializer):
    host = serializers.CharField(help_text="The SSH gateway's host")
    port = serializers.IntegerField(help_text="The SSH gateway's port")
    user = serializers.CharField(help_text="The instance id: the gateway's user name for it")
    command = serializers.CharField(help_text="e.g. ssh -p 2222 <id>@gateway")


class InstanceSerializer(serializers.ModelSerializer):
    gpu_model = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    plan = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    image = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    host = serializers.SlugRelatedField(slug_field="name", read_only=True)
    image_alias = serializers.CharField(
        read_only=True, help_text="The alias the launch named the image by (pytorch-2.1), or ''"
    )
    hf_model = serializers.CharField(read_only=True, help_text="Model asked for at launch, or ''")
    hf_model_cached = serializers.SerializerMethodField(
        help_text="Whether the host's shared cache has hf_model (else it downloads into the "
        "instance's own cache on first use); null without a model"
    )
    gpu_indices = serializers.SerializerMethodField(help_text="GPUs held now, on the host")
    jupyter_url = serializers.SerializerMethodField(
        help_text="JupyterLab at the instance's own origin (no token): only for the owner, "
        "only while running; log in there with a link from connect"
    )
    ssh = serializers.SerializerMethodField(
        help_text="How to SSH in (through the SSH gateway, with your SSH keys): only while "
        "running, and only for images with sshd; else null"
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
            "image_alias",
            "hf_model",
            "hf_model_cached",
            "host",
            "gpu_indices",
            "created_at",
            "running_since",
            "stopped_at",
            "jupyter_url",
            "ssh",
            "idle_stop_minutes",
        ]
        extra_kwargs = {
            "idle_stop_minutes": {
                "read_only": True,
                "help_text": "Stopped (never deleted) after this many idle minutes; 0 = off",
            }
        }

    @extend_schema_field(serializers.BooleanField(allow_null=True))
    def get_hf_model_cached(self, obj: Instance) -> bool | None:
        if not obj.hf_model or obj.host_id is None:
            return None
        return host_has_model(host=obj.host_id, repo_id=obj.hf_model)

    def get_gpu_indices(self, obj: Instance) -> list[int]:
        # Prefetched by the view as ``held_allocations``: the open-ended allocations,
        # the same rule as rentals.selectors.instance_gpus.
        held = getattr(obj, "held_allocations", None)
        if held is None:
            held = obj.allocations.filter(HELD).select_related("gpu")
        return sorted(a.gpu.index for a in held)

    @extend_schema_field(SSHAccessSerializer(allow_null=True))
    def get_ssh(self, obj: Instance) -> dict | None:
        return ssh_access(obj)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_jupyter_url(self, obj: Instance) -> str | None:
        request = self.context.get("request")
        # Its owner, or a member of the owning team who may get in (member or higher).
        is_owner = (
            request is not None
            and account_of(request).pk == obj.user_id
            and role_refusal(request, roles.OPERATE) is None
        )
        if not is_owner or obj.status != InstanceStatus.RUNNING or not obj.jupyter_port:
            return None
        # The instance's own origin, through the gateway: it answers once the holder has
        # logged in there with a link from connect (POST .../connect/). No token in it.
        return f"{routes.origin(obj.pk)}/lab"


class ConnectRequestSerializer(serializers.Serializer):
    port = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=65535,
        help_text="Another HTTP port the image declares; leave out for JupyterLab",
    )


class ConnectLinkSerializer(serializers.Serializer):
    url = serializers.CharField(
        help_text="Logs its holder in once at the instance's origin, then opens it; "
        "expires at expires_at"
    )
    expires_at = serializers.DateTimeField()
    origin = serializers.CharField(help_text="The instance's own origin through the gateway")
    status = serializers.CharField(help_text="The instance's status: running")


class InstanceUsageSerializer(serializers.Serializer):
    """Paid vs used: billed running time beside the GPUs' average utilisation."""

    paid_hours = serializers.FloatField()
    paid_gpu_hours = serializers.FloatField()
    avg_util = serializers.FloatField(allow_null=True, help_text="GPU utilisation, %")
    avg_mem_bytes = serializers.IntegerField(allow_null=True)
    measured_minutes = serializers.IntegerField()
    coverage = serializers.FloatField(
        allow_null=True, help_text="Share of the billed time with measurements"
    )
    simulated = serializers.BooleanField(help_text="Measured on simulated GPUs")


class InstanceDetailSerializer(InstanceSerializer):
    events = InstanceEventSerializer(many=True, read_only=True)
    usage = serializers.SerializerMethodField()

    class Meta(InstanceSerializer.Meta):
        fields = [*InstanceSerializer.Meta.fields, "usage", "events"]

    @extend_schema_field(InstanceUsageSerializer)
    def get_usage(self, obj: Instance) -> dict:
        return InstanceUsageSerializer(instance_usage(instance=obj, now=timezone.now())).data


class IdlePolicySerializer(serializers.Serializer):
    idle_stop_minutes = serializers.IntegerField(
        min_value=0, help_text="Minutes idle before a stop (never a delete); 0 turns it off"
    )


class InstanceListQuerySerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=InstanceStatus.choices,
        required=False,
        help_text="Only instances in this status",
        error_messages={"invalid_choice": STATUS_CHOICE_ERROR},
    )


WAIT_TIMEOUT_MAX = 120  # seconds; behind a proxy, ask for less than its read timeout


class InstanceWaitQuerySerializer(serializers.Serializer):
    wait_for = serializers.ChoiceField(
        choices=InstanceStatus.choices,
        required=False,
        help_text="Long-poll: answer when the instance reaches this status (or failed, lost "
        "or terminated), or when `timeout` runs out, with the state it is in then",
        error_messages={"invalid_choice": STATUS_CHOICE_ERROR},
    )
    timeout = serializers.FloatField(
        required=False,
        default=60.0,
        min_value=0,
        max_value=WAIT_TIMEOUT_MAX,
        help_text=f"Seconds to wait with `wait_for` (0 to {WAIT_TIMEOUT_MAX}, default 60)",
    )


class ConnectWaitQuerySerializer(InstanceWaitQuerySerializer):
    wait_for = serializers.ChoiceField(
        choices=[(InstanceStatus.RUNNING.value, InstanceStatus.RUNNING.label)],
        required=False,
        help_text="Long-poll: make the link the moment the instance runs; a 409 when it "
        "ends failed, lost or terminated instead, or is not running after `timeout` seconds",
        error_messages={
            "invalid_choice": gettext_lazy(
                "{input!r}: a link waits only for the status running (wait_for=running)"
            )
        },
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


class InstanceCreateSerializer(GpuChoiceSerializer):
    """Either ``plan``, or ``gpu_model`` (+ ``gpu_count``); and an ``image``."""

    image = serializers.CharField(
        max_length=64, help_text="Image slug, or an alias of one (pytorch-2.1)"
    )
    name = serializers.CharField(required=False, allow_blank=True, max_length=100, default="")
    model = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=96,
        help_text="A Hugging Face model in the hosts' shared caches (org/name): hosts that "
        "have it are preferred; elsewhere it downloads into the instance's own cache",
    )
    model_repo = serializers.ChoiceField(
        choices=MODEL_REPOS,
        required=False,
        allow_null=True,
        help_text="huggingface: mount the host's shared Hugging Face model cache read-only",
        error_messages={
            "invalid_choice": gettext_lazy(
                "{input!r} is not supported; the only model_repo is 'huggingface'"
            )
        },
    )
    idle_stop_minutes = serializers.IntegerField(
        required=False,
        min_value=0,
        help_text="Stop after this many idle minutes (0 = never); default: the plan's",
    )

    def validate_image(self, value: str) -> ResolvedImage:
        return image_resolved(value)

    def launch_kwargs(self) -> dict:
        data = self.validated_data
        return {
            **self.plan_kwargs(),
            "image": data["image"].template,
            "image_alias": data["image"].alias,
            "hf_model": data.get("model", "").strip(),
            "name": data.get("name", ""),
            "mount_model_cache": data.get("model_repo") == "huggingface",
            "idle_stop_minutes": data.get("idle_stop_minutes"),
        }


# --- account ------------------------------------------------------------------


class ApiKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "scopes",
            "expires_at",
            "created_at",
            "last_used_at",
            "revoked_at",
            "team",
        ]
        read_only_fields = fields

    team = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        allow_null=True,
        help_text="The team whose account the key acts as (null: your own)",
    )


class ApiKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=100, required=False, allow_blank=True, default="", help_text="What it is for"
    )
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=ApiKeyScope.choices),
        required=False,
        allow_empty=False,
        help_text="What the key may do; default every customer scope (read, instances, "
        "reservations, billing). staff: staff only. A key creating a key gives at most its own.",
    )
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="Refused from then on"
    )
    team = serializers.CharField(
        max_length=50,
        required=False,
        allow_null=True,
        default=None,
        help_text="A team's slug: the key acts as that team's account, with your role there",
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
    hourly_burn = money_field(help_text="What your running on-demand instances cost per hour")
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
    team = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The team whose account this key acts as (its slug); null: your own. "
        "Balance, quota and GPUs in use are then the team's",
    )
    team_role = serializers.CharField(
        read_only=True, allow_null=True, help_text="Your role in that team; null: your own"
    )
