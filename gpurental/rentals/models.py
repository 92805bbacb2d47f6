import uuid

from django.conf import settings
from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateTimeRangeField, RangeOperators
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class InstanceStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    PROVISIONING = "provisioning", _("Provisioning")
    RUNNING = "running", _("Running")
    STOPPING = "stopping", _("Stopping")
    STOPPED = "stopped", _("Stopped")
    TERMINATING = "terminating", _("Terminating")
    TERMINATED = "terminated", _("Terminated")
    FAILED = "failed", _("Failed")
    UNREACHABLE = "unreachable", _("Unreachable (host silent; GPUs held, not billed)")
    LOST = "lost", _("Lost (host silent too long; GPUs released, /workspace kept)")


class Instance(models.Model):
    """A customer's GPU container. Its life is the state machine in DESIGN.md."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="instances"
    )
    name = models.CharField(max_length=100, blank=True)
    plan = models.ForeignKey("catalog.Plan", on_delete=models.PROTECT, related_name="instances")
    gpu_model = models.ForeignKey("catalog.GPUModel", on_delete=models.PROTECT, related_name="+")
    gpu_count = models.PositiveSmallIntegerField()
    image = models.ForeignKey(
        "catalog.ImageTemplate", on_delete=models.PROTECT, related_name="instances"
    )
    host = models.ForeignKey(
        "fleet.Host", null=True, blank=True, on_delete=models.PROTECT, related_name="instances"
    )
    # The zone the launch asked for (None: any); placed there again when it moves or recovers.
    zone = models.ForeignKey(
        "fleet.Zone", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    reservation = models.ForeignKey(
        "rentals.Reservation",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="instances",
    )
    # A replica of an elastic group (gpurental/groups/), and its role there: serving
    # (behind the group's endpoint), warm (stopped, ready to be promoted) or draining.
    group = models.ForeignKey(
        "groups.Group", null=True, blank=True, on_delete=models.PROTECT, related_name="replicas"
    )
    # An instance on a dedicated host (gpurental/baremetal/): it holds the lease's
    # allocations, is not metered (the lease is), and gets the dedicated container options.
    lease = models.ForeignKey(
        "baremetal.Lease", null=True, blank=True, on_delete=models.PROTECT, related_name="instances"
    )
    group_role = models.CharField(
        max_length=10,
        blank=True,
        choices=[("serving", "Serving"), ("warm", "Warm"), ("draining", "Draining")],
    )
    status = models.CharField(
        max_length=16, choices=InstanceStatus.choices, default=InstanceStatus.PENDING
    )
    status_reason = models.TextField(
        blank=True, help_text="Why it failed or stopped, for the customer"
    )
    status_changed_at = models.DateTimeField(default=timezone.now)
    jupyter_token = models.CharField(max_length=64, blank=True, editable=False)
    jupyter_port = models.PositiveIntegerField(null=True, blank=True)
    # Every port the agent published for this run, on the host's address: {"8888": 49153,
    # "2222": 49154}. Only the gateways connect to them.
    ports = models.JSONField(default=dict, blank=True, editable=False)
    # The OpenSSH host key of this run's sshd, made by the platform at each start; the SSH
    # gateway checks the container against its public half.
    ssh_host_key = models.TextField(blank=True, editable=False)
    container_id = models.CharField(max_length=80, blank=True)
    mount_model_cache = models.BooleanField(default=False)
    # The name the launch used when it was an alias of the image (catalog.ImageAlias).
    image_alias = models.CharField(max_length=50, blank=True)
    # A customer's own image (gpurental/images/references.py), run with the settings of
    # ``image`` (CUSTOM_IMAGE_TEMPLATE); empty: the template's own image.
    image_ref = models.CharField(max_length=300, blank=True)
    # A snapshot of another instance's /workspace this one's was restored from at its first
    # start (gpurental/volumes/snapshots.py): a clone, or a move to another host.
    workspace_from = models.ForeignKey(
        "volumes.Snapshot", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # A Hugging Face repository asked for at launch ("org/name"): placement prefers hosts
    # whose shared cache has it (gpurental/modelcache).
    hf_model = models.CharField(max_length=96, blank=True)
    idle_stop_minutes = models.PositiveIntegerField(default=30, help_text="0 = never auto-stop")
    # One rank of a cluster launched in one request (rentals.services.clusters): the ranks
    # share the account's private network (gpurental/networks) and find rank 0 by name.
    cluster_id = models.UUIDField(null=True, blank=True, db_index=True)
    cluster_rank = models.PositiveSmallIntegerField(null=True, blank=True)
    cluster_size = models.PositiveSmallIntegerField(null=True, blank=True)
    # When its host is declared lost, relaunch it on another host from its newest workspace
    # snapshot (rentals.services.lifecycle.recovery); otherwise it waits, stopped, for the host.
    auto_recover = models.BooleanField(default=False)
    recovered_from = models.OneToOneField(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="recovered_as",
        help_text="The lost instance this one was relaunched for (each is recovered once)",
    )
    idle_warned_at = models.DateTimeField(
        null=True, blank=True, help_text="When the idle auto-stop warning was sent for this run"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    running_since = models.DateTimeField(
        null=True, blank=True, help_text="Start of the current billed run"
    )
    # No-GPU mode (instance_start(without_gpus=True)): the current or last run holds no GPU
    # and is billed at the plan's no_gpu_hourly_rate.
    without_gpus = models.BooleanField(default=False)
    billed_until = models.DateTimeField(null=True, blank=True, help_text="Metered up to here")
    stopped_at = models.DateTimeField(null=True, blank=True)
    terminated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_count__gte=1), name="instance_gpu_count_positive"
            ),
            models.CheckConstraint(
                condition=(Q(group__isnull=True) & Q(group_role=""))
                | (Q(group__isnull=False) & Q(group_role__in=["serving", "warm", "draining"])),
                name="instance_group_role",
            ),
            models.CheckConstraint(
                condition=Q(without_gpus=False)
                | (Q(reservation__isnull=True) & Q(lease__isnull=True) & Q(group__isnull=True)),
                name="instance_no_gpu_mode_on_demand_only",
            ),
            models.CheckConstraint(  # a reservation or lease has its own host; a group its own replicas
                condition=Q(auto_recover=False)
                | (Q(reservation__isnull=True) & Q(lease__isnull=True) & Q(group__isnull=True)),
                name="instance_auto_recover_on_demand_only",
            ),
            models.CheckConstraint(
                condition=Q(jupyter_port__isnull=True)
                | (Q(jupyter_port__gte=1) & Q(jupyter_port__lte=65535)),
                name="instance_jupyter_port_range",
            ),
            models.CheckConstraint(
                condition=(
                    Q(cluster_id__isnull=True)
                    & Q(cluster_rank__isnull=True)
                    & Q(cluster_size__isnull=True)
                )
                | (
                    Q(cluster_id__isnull=False)
                    & Q(cluster_rank__isnull=False)
                    & Q(cluster_size__gte=2)
                    & Q(cluster_rank__lt=models.F("cluster_size"))
                ),
                name="instance_cluster_rank",
            ),
            models.UniqueConstraint(
                fields=["cluster_id", "cluster_rank"], name="instance_one_per_cluster_rank"
            ),
        ]
        indexes = [
            models.Index(fields=["status"]),
            models.Index(fields=["user", "status"]),
            # The lists' order (newest first, the id breaking ties): keyset pages start
            # at their position through these, for staff (all) and for one customer.
            models.Index(fields=["created_at", "id"], name="instance_created_keyset"),
            models.Index(fields=["user", "created_at", "id"], name="instance_user_keyset"),
        ]

    def __str__(self) -> str:
        return self.name or f"instance {str(self.id)[:8]}"

    @property
    def is_on_demand(self) -> bool:
        """Not bound to a reservation, a dedicated host or an elastic group: what no-GPU mode
        and auto-recover are for (the DB checks above say the same)."""
        return not (self.reservation_id or self.lease_id or self.group_id)


class InstanceEvent(models.Model):
    """Append-only history of an instance: state transitions and progress steps."""

    class Kind(models.TextChoices):
        TRANSITION = "transition", "Transition"
        PROGRESS = "progress", "Progress"
        NOTICE = "notice", "Notice"

    instance = models.ForeignKey(Instance, on_delete=models.PROTECT, related_name="events")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TRANSITION)
    from_status = models.CharField(max_length=16, choices=InstanceStatus.choices, blank=True)
    to_status = models.CharField(max_length=16, choices=InstanceStatus.choices, blank=True)
    step = models.CharField(
        max_length=32, blank=True, help_text="Progress step, e.g. pulling_image"
    )
    reason = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        if self.kind == self.Kind.TRANSITION:
            return f"{self.from_status or '∅'} → {self.to_status}"
        return f"{self.kind}: {self.step or self.reason}"


class ReservationStatus(models.TextChoices):
    BOOKED = "booked", _("Booked")
    ACTIVE = "active", _("Active")
    COMPLETED = "completed", _("Completed")
    CANCELLED = "cancelled", _("Cancelled")


class Reservation(models.Model):
    """N GPUs of a model booked for [start, end), paid at booking with the reserved discount."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="reservations"
    )
    plan = models.ForeignKey("catalog.Plan", on_delete=models.PROTECT, related_name="reservations")
    gpu_model = models.ForeignKey("catalog.GPUModel", on_delete=models.PROTECT, related_name="+")
    gpu_count = models.PositiveSmallIntegerField()
    image = models.ForeignKey("catalog.ImageTemplate", on_delete=models.PROTECT, related_name="+")
    period = DateTimeRangeField()
    status = models.CharField(
        max_length=16, choices=ReservationStatus.choices, default=ReservationStatus.BOOKED
    )
    price = models.DecimalField(max_digits=12, decimal_places=2)
    refunded = models.DecimalField(
        max_digits=12, decimal_places=2, default=0, help_text="Paid back on cancellation"
    )
    created_at = models.DateTimeField(default=timezone.now)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    end_warned_at = models.DateTimeField(
        null=True, blank=True, help_text="When the customer was told the end is near"
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_count__gte=1), name="reservation_gpu_count_positive"
            ),
            models.CheckConstraint(
                condition=Q(price__gte=0), name="reservation_price_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(refunded__gte=0) & Q(refunded__lte=F("price")),
                name="reservation_refund_within_price",
            ),
            models.CheckConstraint(
                condition=Q(period__isempty=False)
                & Q(period__lower_inf=False)
                & Q(period__upper_inf=False),
                name="reservation_period_bounded",
            ),
        ]
        indexes = [models.Index(fields=["status"]), models.Index(fields=["user", "status"])]

    def __str__(self) -> str:
        return f"{self.gpu_count}× {self.gpu_model.short_name} from {self.period.lower:%Y-%m-%d %H:%M} UTC"

    @property
    def start(self):
        return self.period.lower

    @property
    def end(self):
        return self.period.upper

    @property
    def gpu_hours(self):
        return (self.end - self.start).total_seconds() * self.gpu_count / 3600


class ReservationEvent(models.Model):
    """Append-only history of a reservation: booked, active, completed, cancelled."""

    reservation = models.ForeignKey(Reservation, on_delete=models.PROTECT, related_name="events")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    from_status = models.CharField(max_length=16, choices=ReservationStatus.choices, blank=True)
    to_status = models.CharField(max_length=16, choices=ReservationStatus.choices, blank=True)
    reason = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.from_status or '∅'} → {self.to_status or self.reason}"


class Allocation(models.Model):
    """A GPU held by an instance or a reservation over a period.

    The exclusion constraint makes double booking impossible: no two allocations of
    one GPU may overlap. An on-demand instance holds [start, ∞) until it stops.
    """

    gpu = models.ForeignKey("fleet.GPU", on_delete=models.PROTECT, related_name="allocations")
    instance = models.ForeignKey(
        Instance, null=True, blank=True, on_delete=models.PROTECT, related_name="allocations"
    )
    reservation = models.ForeignKey(
        Reservation, null=True, blank=True, on_delete=models.PROTECT, related_name="allocations"
    )
    # A whole-host lease holds every GPU of its host this way (gpurental/baremetal/).
    lease = models.ForeignKey(
        "baremetal.Lease",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="allocations",
    )
    period = DateTimeRangeField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            ExclusionConstraint(
                name="allocation_no_gpu_double_booking",
                expressions=[("gpu", RangeOperators.EQUAL), ("period", RangeOperators.OVERLAPS)],
            ),
            models.CheckConstraint(
                condition=Q(instance__isnull=False)
                | Q(reservation__isnull=False)
                | Q(lease__isnull=False),
                name="allocation_has_holder",
            ),
            models.CheckConstraint(
                condition=Q(period__isempty=False) & Q(period__lower_inf=False),
                name="allocation_period_starts",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpu} {self.period}"
