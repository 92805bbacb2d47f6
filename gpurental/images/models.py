"""Customers' own images: the registry logins an account saves once, for its launches of
images from private registries (``references.py`` reads the references)."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class RegistryCredential(models.Model):
    """A login to one registry for one account (a person's or a team's). The password is
    encrypted (``secrets.py``), never shown again, and travels only inside the start spec
    sealed for the host that pulls."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    account = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="registry_credentials"
    )
    registry = models.CharField(max_length=255, help_text="host[:port], e.g. ghcr.io")
    username = models.CharField(max_length=255)
    password_encrypted = models.TextField(editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["registry"]
        constraints = [
            models.UniqueConstraint(
                "account", Lower("registry"), name="registry_credential_one_per_registry"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.username}@{self.registry}"


class HostImage(models.Model):
    """A customer's image a host holds in its cache (each heartbeat's list replaces the
    host's rows): placement prefers these hosts for launches of that image."""

    host = models.ForeignKey("fleet.Host", on_delete=models.CASCADE, related_name="images")
    reference = models.CharField(max_length=300)
    size_bytes = models.BigIntegerField(default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["host", "reference"]
        constraints = [
            models.UniqueConstraint(fields=["host", "reference"], name="host_image_unique"),
            models.CheckConstraint(condition=models.Q(size_bytes__gte=0), name="host_image_size"),
        ]

    def __str__(self) -> str:
        return f"{self.reference} on {self.host}"


class SavedImageStatus(models.TextChoices):
    SAVING = "saving", _("Saving")
    READY = "ready", _("Ready")
    FAILED = "failed", _("Failed")
    DELETED = "deleted", _("Deleted")


class SavedImage(models.Model):
    """An instance's container saved as a private image of its account: committed on the
    instance's host and pushed to the platform's registry (``PLATFORM_REGISTRY``), from
    where it launches on any host. /workspace is not in it (that is the instance's data)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    account = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="saved_images"
    )
    name = models.CharField(max_length=64)
    reference = models.CharField(max_length=300, unique=True)
    # The catalog template whose port, SSH port and env it runs with (its instance's).
    template = models.ForeignKey(
        "catalog.ImageTemplate", on_delete=models.PROTECT, related_name="+"
    )
    source_instance = models.ForeignKey(
        "rentals.Instance", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(
        max_length=10, choices=SavedImageStatus.choices, default=SavedImageStatus.SAVING
    )
    status_reason = models.TextField(blank=True)
    size_bytes = models.BigIntegerField(default=0)
    digest = models.CharField(max_length=80, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    ready_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # One live image per name and account (a deleted one's name may be used again).
            models.UniqueConstraint(
                fields=["account", "name"],
                condition=~models.Q(status__in=["deleted", "failed"]),
                name="saved_image_name_unique",
            ),
            models.CheckConstraint(condition=models.Q(size_bytes__gte=0), name="saved_image_size"),
            models.CheckConstraint(
                condition=models.Q(status="ready", ready_at__isnull=False)
                | ~models.Q(status="ready"),
                name="saved_image_ready_has_time",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.reference})"


class SavedImageEvent(models.Model):
    """Append-only history of a saved image: its transitions and the push's progress."""

    image = models.ForeignKey(SavedImage, on_delete=models.PROTECT, related_name="events")
    created_at = models.DateTimeField(default=timezone.now)
    from_status = models.CharField(max_length=10, blank=True)
    to_status = models.CharField(max_length=10, blank=True)
    reason = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.from_status or '∅'} → {self.to_status or self.reason[:60]}"
