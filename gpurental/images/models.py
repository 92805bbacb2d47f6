"""Customers' own images: the registry logins an account saves once, for its launches of
images from private registries (``references.py`` reads the references)."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone


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
