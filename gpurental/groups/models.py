"""Elastic groups (DESIGN.md "Elastic groups"). Replicas are ordinary instances
(``Instance.group``, ``Instance.group_role``): placed, metered and isolated like any."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

MAX_REPLICAS = 50


class Group(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", _("Active")
        DELETING = "deleting", _("Deleting (replicas terminating)")
        DELETED = "deleted", _("Deleted")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="elastic_groups"
    )
    name = models.SlugField(max_length=50, help_text="Unique among the owner's live groups")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    image = models.ForeignKey("catalog.ImageTemplate", on_delete=models.PROTECT, related_name="+")
    plan = models.ForeignKey("catalog.Plan", on_delete=models.PROTECT, related_name="+")
    port = models.PositiveIntegerField(help_text="The port replicas serve requests on (inside)")
    min_replicas = models.PositiveSmallIntegerField(default=1)
    max_replicas = models.PositiveSmallIntegerField(
        default=4, validators=[MaxValueValidator(MAX_REPLICAS)]
    )
    warm_pool_size = models.PositiveSmallIntegerField(default=0)
    # Requests one replica serves at once: the endpoint's balancing and the queue rule's unit.
    max_concurrency = models.PositiveSmallIntegerField(default=4, validators=[MinValueValidator(1)])
    queue_size = models.PositiveIntegerField(
        default=100, help_text="Requests held while no replica can take them; then 503"
    )
    scale_up_cooldown_s = models.PositiveIntegerField(default=30)
    scale_down_cooldown_s = models.PositiveIntegerField(default=300)
    prewarm_lead_minutes = models.PositiveSmallIntegerField(default=15)
    # The spec as last applied (normalised), so that applying again changes only what differs.
    spec = models.JSONField(default=dict)
    endpoint_key_hash = models.CharField(max_length=64, blank=True, editable=False)
    # After a rotation the key it replaced keeps working until previous_key_until (the
    # overlap in which callers switch over), then never again (services.group_endpoint_key_rotate).
    previous_key_hash = models.CharField(max_length=64, blank=True, editable=False)
    previous_key_until = models.DateTimeField(null=True, blank=True, editable=False)
    desired_replicas = models.PositiveSmallIntegerField(default=0)
    last_scale_up_at = models.DateTimeField(null=True, blank=True)
    last_scale_down_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "name"],
                condition=~Q(status="deleted"),
                name="group_name_unique_per_user",
            ),
            models.CheckConstraint(
                condition=Q(min_replicas__lte=F("max_replicas")), name="group_min_le_max"
            ),
            models.CheckConstraint(
                condition=Q(max_replicas__gte=1) & Q(max_replicas__lte=MAX_REPLICAS),
                name="group_max_range",
            ),
            models.CheckConstraint(
                condition=Q(warm_pool_size__lte=MAX_REPLICAS), name="group_warm_pool_range"
            ),
            models.CheckConstraint(condition=Q(max_concurrency__gte=1), name="group_concurrency"),
            models.CheckConstraint(
                condition=Q(port__gte=1) & Q(port__lte=65535), name="group_port_range"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class ScalingRule(models.Model):
    class Metric(models.TextChoices):
        GPU_UTILIZATION = "gpu_utilization", "GPU utilisation (mean over replicas, %)"
        QUEUE = "queue", "Requests waiting and in flight, per replica"
        SCHEDULE = "schedule", "Schedule (cron: a minimum while it matches)"

    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="rules")
    metric = models.CharField(max_length=20, choices=Metric.choices)
    # gpu_utilization: target %; queue: target requests per replica.
    threshold = models.DecimalField(max_digits=7, decimal_places=2, null=True, blank=True)
    # schedule: a cron expression in the operator's time zone, and the minimum while it matches.
    cron = models.CharField(max_length=100, blank=True)
    min_replicas = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(metric__in=["gpu_utilization", "queue", "schedule"]),
                name="rule_metric_known",
            ),
            models.CheckConstraint(
                condition=(Q(metric="schedule", min_replicas__isnull=False) & ~Q(cron=""))
                | (~Q(metric="schedule") & Q(threshold__gt=0)),
                name="rule_has_its_parameters",
            ),
        ]

    def __str__(self) -> str:
        if self.metric == self.Metric.SCHEDULE:
            return f"schedule {self.cron!r}: at least {self.min_replicas}"
        return f"{self.metric} {self.threshold}"


class GroupEvent(models.Model):
    class Kind(models.TextChoices):
        APPLIED = "applied", "Spec applied"
        SCALED = "scaled", "Scaling decision"
        BLOCKED = "blocked", "Scale-out blocked"
        REPLICA = "replica", "Replica change"
        KEY = "key", "Endpoint key rotated"

    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    from_replicas = models.PositiveSmallIntegerField(null=True, blank=True)
    to_replicas = models.PositiveSmallIntegerField(null=True, blank=True)
    reason = models.TextField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.reason}"


class LoadSample(models.Model):
    """One autoscaler tick's view of a group's load: the live charts and pre-warm's history."""

    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField(db_index=True)
    ready = models.PositiveSmallIntegerField()
    provisioning = models.PositiveSmallIntegerField()
    warm = models.PositiveSmallIntegerField()
    rps = models.FloatField()
    inflight = models.FloatField()
    queued = models.FloatField()
    latency_p50_ms = models.FloatField(null=True)
    latency_p99_ms = models.FloatField(null=True)
    errors = models.PositiveIntegerField(default=0)
    gpu_util = models.FloatField(null=True)
    needed = models.PositiveSmallIntegerField(help_text="Replicas the load alone asked for")

    class Meta:
        ordering = ["at"]
        indexes = [models.Index(fields=["group", "at"])]

    def __str__(self) -> str:
        return f"{self.group_id} at {self.at:%H:%M:%S}: {self.ready} ready, {self.rps:.1f} rps"
