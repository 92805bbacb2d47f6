"""Shapes of instances: list and detail, launch, connect, long-poll queries."""

from __future__ import annotations

from django.utils import timezone
from django.utils.text import format_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpurental.api.catalog.serializers import GpuChoiceSerializer, launch_image_resolved
from gpurental.api.fields import zone_of_host_field
from gpurental.api.volumes.serializers import VolumeMountSerializer
from gpurental.catalog.selectors import ResolvedImage
from gpurental.fleet.zones import UnknownZone, zone_named
from gpurental.gateway import routes
from gpurental.gateway.sshroutes import ssh_access
from gpurental.modelcache.selectors import host_has_model
from gpurental.networks.services import names_of
from gpurental.rentals.models import Instance, InstanceEvent, InstanceStatus
from gpurental.rentals.selectors import HELD
from gpurental.rentals.services.clusters import MAX_SIZE as CLUSTER_MAX_SIZE
from gpurental.rentals.services.clusters import PLACEMENTS as CLUSTER_PLACEMENTS
from gpurental.teams import roles
from gpurental.teams.acting import account_of, role_refusal
from gpurental.telemetry.selectors import instance_usage
from gpurental.volumes.selectors import volumes_mounted

MODEL_REPOS = ["huggingface"]

# DRF fills in {input} when it raises; the list of statuses is appended as it is (codes).
STATUS_CHOICE_ERROR = format_lazy(
    "{} {}",
    gettext_lazy("{input!r} is not an instance status; choose one of:"),
    ", ".join(InstanceStatus.values),
)


class PullProgressSerializer(serializers.Serializer):
    layers = serializers.IntegerField(help_text="Layers of the image known so far")
    layers_done = serializers.IntegerField(help_text="Layers downloaded and unpacked")
    bytes = serializers.IntegerField(help_text="Bytes downloaded (compressed)")
    total = serializers.IntegerField(help_text="Bytes to download, as far as known")
    percent = serializers.FloatField()


class InstanceEventSerializer(serializers.ModelSerializer):
    at = serializers.DateTimeField(source="created_at", read_only=True)
    pull = serializers.SerializerMethodField(
        help_text="While your own image is pulled (step pulling_image): its progress; else null"
    )

    class Meta:
        model = InstanceEvent
        fields = ["at", "kind", "from_status", "to_status", "step", "reason", "pull"]

    @extend_schema_field(PullProgressSerializer(allow_null=True))
    def get_pull(self, obj) -> dict | None:
        return (obj.data or {}).get("pull")


class SSHAccessSerializer(serializers.Serializer):
    host = serializers.CharField(help_text="The SSH gateway's host")
    port = serializers.IntegerField(help_text="The SSH gateway's port")
    user = serializers.CharField(help_text="The instance id: the gateway's user name for it")
    command = serializers.CharField(help_text="e.g. ssh -p 2222 <id>@gateway")


class ClusterPlaceSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    rank = serializers.IntegerField(help_text="0 is the master (MASTER_ADDR)")
    size = serializers.IntegerField(help_text="WORLD_SIZE")


class InstanceSerializer(serializers.ModelSerializer):
    gpu_model = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    plan = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    image = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    host = serializers.SlugRelatedField(slug_field="name", read_only=True)
    zone = zone_of_host_field("The zone of its host, or null")
    image_ref = serializers.CharField(
        read_only=True,
        help_text="Your own image's reference when the launch named one (run with the "
        "settings of `image`), or ''",
    )
    image_alias = serializers.CharField(
        read_only=True, help_text="The alias the launch named the image by (pytorch-2.1), or ''"
    )
    hf_model = serializers.CharField(read_only=True, help_text="Model asked for at launch, or ''")
    volumes = serializers.SerializerMethodField(
        help_text="Your volumes it mounts: [{volume, path}]"
    )
    hf_model_cached = serializers.SerializerMethodField(
        help_text="Whether the host's shared cache has hf_model (else it downloads into the "
        "instance's own cache on first use); null without a model"
    )
    gpu_indices = serializers.SerializerMethodField(help_text="GPUs held now, on the host")
    jupyter_url = serializers.SerializerMethodField(
        help_text="JupyterLab at the instance's own origin (no token): only for the owner, "
        "only while running; log in there with a link from connect"
    )
    recovered_as = serializers.SerializerMethodField(
        help_text="The instance relaunched on another host for this one when its host was "
        "lost, or null"
    )
    ssh = serializers.SerializerMethodField(
        help_text="How to SSH in (through the SSH gateway, with your SSH keys): only while "
        "running, and only for images with sshd; else null"
    )
    private_names = serializers.SerializerMethodField(
        help_text="Its names on your private network, where your other instances on its "
        "host reach it (ping, iperf3, torch.distributed); [] on a dedicated host"
    )
    cluster = serializers.SerializerMethodField(
        help_text="Its place in a cluster launched with POST /instances/cluster/: "
        "{id, rank, size}; null outside one"
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
            "image_ref",
            "image_alias",
            "volumes",
            "hf_model",
            "hf_model_cached",
            "host",
            "zone",
            "gpu_indices",
            "without_gpus",
            "created_at",
            "running_since",
            "stopped_at",
            "jupyter_url",
            "ssh",
            "idle_stop_minutes",
            "auto_recover",
            "recovered_from",
            "recovered_as",
            "private_names",
            "cluster",
        ]
        extra_kwargs = {
            "auto_recover": {
                "read_only": True,
                "help_text": "When its host is lost, it is relaunched on another host from its "
                "newest workspace snapshot (POST auto-recover)",
            },
            "recovered_from": {
                "read_only": True,
                "help_text": "The lost instance this one was relaunched for, or null",
            },
            "without_gpus": {
                "read_only": True,
                "help_text": "The current (or last) run has no GPU: no-GPU mode, billed at the "
                "plan's no_gpu_hourly_rate (POST start with without_gpus)",
            },
            "idle_stop_minutes": {
                "read_only": True,
                "help_text": "Stopped (never deleted) after this many idle minutes; 0 = off",
            },
        }

    def _when(self, value) -> str:
        """DRF's DateTimeField output (ISO 8601 in the current time zone, UTC as Z)."""
        if not hasattr(self, "_tz"):
            self._tz = timezone.get_current_timezone()
        text = value.astimezone(self._tz).isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text

    def to_representation(self, obj: Instance) -> dict:
        """The list's items, field by field as DRF would write them, without DRF's walk over
        its fields (about 10 µs a field: 200 items × 28 fields was most of a page's time).
        tests/api/instances/test_list_shape.py holds it to DRF's own output; a subclass
        (the detail) goes DRF's way."""
        if type(self) is not InstanceSerializer:
            return super().to_representation(obj)
        when = self._when
        host = obj.host
        zone = host.zone if host is not None else None
        return {
            "id": str(obj.pk),
            "name": obj.name,
            "status": obj.status,
            "status_reason": obj.status_reason,
            "gpu_model": obj.gpu_model.slug if obj.gpu_model_id else None,
            "gpu_count": obj.gpu_count,
            "plan": obj.plan.slug if obj.plan_id else None,
            "image": obj.image.slug if obj.image_id else None,
            "image_ref": obj.image_ref,
            "image_alias": obj.image_alias,
            "volumes": self.get_volumes(obj),
            "hf_model": obj.hf_model,
            "hf_model_cached": self.get_hf_model_cached(obj),
            "host": host.name if host is not None else None,
            "zone": zone.name if zone is not None else None,
            "gpu_indices": self.get_gpu_indices(obj),
            "without_gpus": obj.without_gpus,
            "created_at": when(obj.created_at),
            "running_since": when(obj.running_since) if obj.running_since else None,
            "stopped_at": when(obj.stopped_at) if obj.stopped_at else None,
            "jupyter_url": self.get_jupyter_url(obj),
            "ssh": self.get_ssh(obj),
            "idle_stop_minutes": obj.idle_stop_minutes,
            "auto_recover": obj.auto_recover,
            "recovered_from": obj.recovered_from_id,
            "recovered_as": self.get_recovered_as(obj),
            "private_names": self.get_private_names(obj),
            "cluster": self.get_cluster(obj),
        }

    @extend_schema_field(serializers.UUIDField(allow_null=True))
    def get_recovered_as(self, obj: Instance) -> str | None:
        new = getattr(obj, "recovered_as", None)
        return str(new.pk) if new is not None else None

    @extend_schema_field(serializers.BooleanField(allow_null=True))
    def get_hf_model_cached(self, obj: Instance) -> bool | None:
        if not obj.hf_model or obj.host_id is None:
            return None
        return host_has_model(host=obj.host_id, repo_id=obj.hf_model)

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_volumes(self, obj: Instance) -> list[dict]:
        return [{"volume": v["volume"], "path": v["path"]} for v in volumes_mounted(instance=obj)]

    def get_gpu_indices(self, obj: Instance) -> list[int]:
        # Prefetched by the view as ``held_allocations``: the open-ended allocations,
        # the same rule as rentals.selectors.instance_gpus.
        held = getattr(obj, "held_allocations", None)
        if held is None:
            held = obj.allocations.filter(HELD).select_related("gpu")
        return sorted(a.gpu.index for a in held)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_private_names(self, obj: Instance) -> list[str]:
        return [] if obj.lease_id else names_of(obj)

    @extend_schema_field(ClusterPlaceSerializer(allow_null=True))
    def get_cluster(self, obj: Instance) -> dict | None:
        if obj.cluster_id is None:
            return None
        return {"id": str(obj.cluster_id), "rank": obj.cluster_rank, "size": obj.cluster_size}

    @extend_schema_field(SSHAccessSerializer(allow_null=True))
    def get_ssh(self, obj: Instance) -> dict | None:
        return ssh_access(obj)

    def _operator_account(self) -> int | None:
        """The account whose instances the caller may get into (member or higher), once a
        request: a list asks for every item."""
        if not hasattr(self, "_operator"):
            request = self.context.get("request")
            self._operator = (
                account_of(request).pk
                if request is not None and role_refusal(request, roles.OPERATE) is None
                else None
            )
        return self._operator

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_jupyter_url(self, obj: Instance) -> str | None:
        # Its owner, or a member of the owning team who may get in (member or higher).
        is_owner = obj.user_id is not None and self._operator_account() == obj.user_id
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


class StartRequestSerializer(serializers.Serializer):
    without_gpus = serializers.BooleanField(
        default=False,
        help_text="No-GPU mode: start on its host with no GPU (NO_GPU_VCPUS vCPUs, "
        "NO_GPU_MEMORY_GB GB) at the plan's no_gpu_hourly_rate, to reach or copy out its data "
        "while its GPUs are taken; a later start without it takes GPUs again",
    )


class IdlePolicySerializer(serializers.Serializer):
    idle_stop_minutes = serializers.IntegerField(
        min_value=0, help_text="Minutes idle before a stop (never a delete); 0 turns it off"
    )


class AutoRecoverSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(
        help_text="On: relaunched elsewhere when its host is lost; off: it waits for the host"
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


class InstanceCreateSerializer(GpuChoiceSerializer):
    """Either ``plan``, or ``gpu_model`` (+ ``gpu_count``); and an ``image``."""

    image = serializers.CharField(
        max_length=300,
        help_text="Image slug, or an alias of one (pytorch-2.1), or your own image's "
        "reference (registry.example.com/team/train:1, or …@sha256:…): pulled from its "
        "registry with the login you saved for it (/api/v1/registry-logins/)",
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
    auto_recover = serializers.BooleanField(
        required=False,
        default=False,
        help_text="When its host is lost, relaunch it on another host from its newest "
        "workspace snapshot (else empty); off: it waits for its host",
    )
    zone = serializers.CharField(
        max_length=63,
        required=False,
        help_text="Run only on a host in this zone (the catalog's `zones`); if its host is "
        "lost, auto-recover relaunches it in this zone, else in another of its region",
    )
    volumes = VolumeMountSerializer(
        many=True,
        required=False,
        help_text="Your volumes to mount (/api/v1/volumes/): the instance then runs on their "
        "host; each must not be held by an instance that has not ended",
    )

    workspace_from = serializers.CharField(
        max_length=64,
        required=False,
        help_text="A ready snapshot of another instance's /workspace (/api/v1/snapshots/, by "
        "id or name): this one's starts with its files, on whatever host it lands on",
    )

    def validate_image(self, value: str) -> ResolvedImage:
        request = self.context.get("request")
        return launch_image_resolved(value, account=account_of(request) if request else None)

    def validate_zone(self, value: str):
        try:
            return zone_named(value)
        except UnknownZone as exc:
            raise serializers.ValidationError(exc.message) from exc

    def validate_workspace_from(self, value: str):
        from gpurental.volumes.models import Snapshot, SnapshotStatus
        from gpurental.volumes.services import is_uuid

        request = self.context.get("request")
        mine = Snapshot.objects.filter(account=account_of(request), instance__isnull=False).exclude(
            status=SnapshotStatus.DELETED
        )
        found = mine.filter(pk=value).first() if is_uuid(value) else mine.filter(name=value).first()
        if found is None:
            raise serializers.ValidationError(
                _("you have no workspace snapshot %(ref)s") % {"ref": value}
            )
        return found

    def launch_kwargs(self) -> dict:
        data = self.validated_data
        return {
            **self.plan_kwargs(),
            "image": data["image"].template,
            "image_alias": data["image"].alias,
            "image_ref": data["image"].reference,
            "volumes": [(v["volume"], v["mount_path"]) for v in data.get("volumes") or []],
            "workspace_from": data.get("workspace_from"),
            "hf_model": data.get("model", "").strip(),
            "name": data.get("name", ""),
            "mount_model_cache": data.get("model_repo") == "huggingface",
            "idle_stop_minutes": data.get("idle_stop_minutes"),
            "auto_recover": data.get("auto_recover", False),
            "zone": data.get("zone"),
        }


class ClusterCreateSerializer(GpuChoiceSerializer):
    """Either ``plan``, or ``gpu_model`` (+ ``gpu_count``) per instance; an ``image``; how
    many instances and where."""

    image = serializers.CharField(
        max_length=50, help_text="Image slug, or an alias of one (pytorch-2.1)"
    )
    name = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=90,
        default="",
        help_text="The instances are named <name>-0 … <name>-<size-1> (default cluster-<id>)",
    )
    size = serializers.IntegerField(
        min_value=2, max_value=CLUSTER_MAX_SIZE, help_text="How many instances (WORLD_SIZE)"
    )
    placement = serializers.ChoiceField(
        choices=CLUSTER_PLACEMENTS,
        default="pack",
        help_text="pack: every instance on one host; spread (one per host) is refused until "
        "the private network reaches across hosts",
    )

    def validate_image(self, value: str) -> ResolvedImage:
        request = self.context.get("request")
        resolved = launch_image_resolved(value, account=account_of(request) if request else None)
        if resolved.reference:
            raise serializers.ValidationError(
                _("a cluster runs a catalog image; launch your own image one instance at a time")
            )
        return resolved

    def launch_kwargs(self) -> dict:
        data = self.validated_data
        return {
            **self.plan_kwargs(),
            "image": data["image"].template,
            "image_alias": data["image"].alias,
            "name": data.get("name", ""),
            "size": data["size"],
            "placement": data["placement"],
        }


class ClusterSerializer(serializers.Serializer):
    id = serializers.UUIDField(help_text="The cluster's id (each instance's cluster.id)")
    instances = InstanceDetailSerializer(many=True, help_text="Its instances, by rank")
