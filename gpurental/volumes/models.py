"""Volumes: a customer's data apart from any one instance. A volume lives on one host (a
Docker volume there, ``gpurental-vol-<id>``), is mounted into an instance at launch at a
path of the customer's choice, and outlives it: the next instance on that host mounts it
again. It is in use while the instance it was last attached to has not ended."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class VolumeStatus(models.TextChoices):
    RESTORING = "restoring", _("Restoring")  # made from a snapshot on its host, not yet usable
    AVAILABLE = "available", _("Available")
    FAILED = "failed", _("Failed")  # its restore failed: nothing on the host
    DELETED = "deleted", _("Deleted")


class Volume(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    account = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="volumes"
    )
    name = models.CharField(max_length=64)
    host = models.ForeignKey("fleet.Host", on_delete=models.PROTECT, related_name="volumes")
    size_gb = models.PositiveIntegerField(help_text="What it may hold; writes past it are stopped")
    status = models.CharField(
        max_length=10, choices=VolumeStatus.choices, default=VolumeStatus.AVAILABLE
    )
    # The instance it was last attached to, and where; in use while that one has not ended.
    instance = models.ForeignKey(
        "rentals.Instance", null=True, blank=True, on_delete=models.SET_NULL, related_name="volumes"
    )
    mount_path = models.CharField(max_length=200, blank=True)
    used_bytes = models.BigIntegerField(default=0, help_text="As the host last measured it")
    measured_at = models.DateTimeField(null=True, blank=True)
    # The snapshot it was restored from (gpurental/volumes/snapshots.py), if any.
    restored_from = models.ForeignKey(
        "volumes.Snapshot", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    status_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["account", "name"],
                condition=Q(status__in=["restoring", "available"]),
                name="volume_name_unique",
            ),
            models.CheckConstraint(condition=Q(size_gb__gte=1), name="volume_size_positive"),
            models.CheckConstraint(
                condition=Q(instance__isnull=True) | ~Q(mount_path=""), name="volume_mounted_at"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def docker_name(self) -> str:
        return f"gpurental-vol-{self.pk}"


class VolumeEvent(models.Model):
    """Append-only history of a volume: created, attached, detached, over its size, deleted."""

    volume = models.ForeignKey(Volume, on_delete=models.PROTECT, related_name="events")
    created_at = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=16)
    reason = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.reason[:60]}"


class SnapshotStatus(models.TextChoices):
    SAVING = "saving", _("Saving")
    READY = "ready", _("Ready")
    FAILED = "failed", _("Failed")
    DELETED = "deleted", _("Deleted")


class Snapshot(models.Model):
    """A volume's files, or a stopped instance's /workspace, as a tar in the operator's
    S3-compatible object storage (``SNAPSHOT_S3_*``): a volume's restores into a new volume
    on any host, a workspace's into the /workspace of a new instance on any host."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    account = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="snapshots"
    )
    name = models.CharField(max_length=64)
    volume = models.ForeignKey(
        Volume, null=True, blank=True, on_delete=models.PROTECT, related_name="snapshots"
    )
    # Or the instance whose /workspace it holds.
    instance = models.ForeignKey(
        "rentals.Instance", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    status = models.CharField(
        max_length=10, choices=SnapshotStatus.choices, default=SnapshotStatus.SAVING
    )
    status_reason = models.TextField(blank=True)
    object_key = models.CharField(max_length=200, unique=True)
    size_bytes = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    ready_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["account", "name"],
                condition=Q(status__in=["saving", "ready"]),
                name="snapshot_name_unique",
            ),
            models.CheckConstraint(
                condition=~Q(status="ready") | (Q(ready_at__isnull=False) & ~Q(sha256="")),
                name="snapshot_ready_has_its_digest",
            ),
            models.CheckConstraint(
                condition=(Q(volume__isnull=False) & Q(instance__isnull=True))
                | (Q(volume__isnull=True) & Q(instance__isnull=False)),
                name="snapshot_of_a_volume_or_a_workspace",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def source_name(self) -> str:
        """What it is a snapshot of, for people: the volume's name, or "/workspace of …"."""
        if self.volume_id is not None:
            return self.volume.name
        return f"/workspace of {self.instance}"
