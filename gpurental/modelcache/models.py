"""The control plane's catalog of each host's shared Hugging Face cache.

The files live on the host (the agent fills, lists and evicts them: agent/modelcache.py);
these rows say what each host has, for placement (hosts that have a launch's model come
first) and for operators. A row follows the agent's reports: ``filling`` and ``evicting``
while a request is out, ``ready`` once the agent has it, ``failed`` with the reason.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from gpurental.fleet.models import Host


class CacheStatus(models.TextChoices):
    FILLING = "filling", "Filling"
    READY = "ready", "Ready"
    EVICTING = "evicting", "Evicting"
    FAILED = "failed", "Failed"


class CachedModel(models.Model):
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="cached_models")
    repo_id = models.CharField(max_length=96, help_text="Hugging Face repository, org/name")
    status = models.CharField(max_length=16, choices=CacheStatus.choices)
    revision = models.CharField(max_length=64, blank=True, help_text="What refs/main names")
    revisions = models.JSONField(default=list, blank=True)
    size_bytes = models.BigIntegerField(default=0)
    files = models.PositiveIntegerField(default=0)
    source = models.CharField(
        max_length=255, blank=True, help_text="What it was filled from (import directory)"
    )
    reason = models.TextField(blank=True, help_text="Why the last request failed")
    updated_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["host__name", "repo_id"]
        constraints = [
            models.UniqueConstraint(fields=["host", "repo_id"], name="cachedmodel_one_per_host"),
            models.CheckConstraint(condition=Q(size_bytes__gte=0), name="cachedmodel_size"),
        ]
        indexes = [models.Index(fields=["repo_id", "status"])]

    def __str__(self) -> str:
        return f"{self.repo_id} on {self.host.name}"


class CacheEvent(models.Model):
    """Append-only: every change to a host's cache, asked for or found."""

    class Kind(models.TextChoices):
        FILL_REQUESTED = "fill_requested"
        FILLED = "filled"
        FILL_FAILED = "fill_failed"
        EVICT_REQUESTED = "evict_requested"
        EVICTED = "evicted"
        EVICT_FAILED = "evict_failed"
        APPEARED = "appeared", "Found in the cache"
        DISAPPEARED = "disappeared", "Gone from the cache"

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="cache_events")
    repo_id = models.CharField(max_length=96, blank=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.repo_id} on {self.host_id}"
