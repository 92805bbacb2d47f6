from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from gpurental import protocol


class HostStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    DRAINING = "draining", "Draining (no new placements)"
    MAINTENANCE = "maintenance", "Maintenance"
    OFFLINE = "offline", "Offline (heartbeat lost)"
    # The acceptance benchmark (gpurental/acceptance) gates placements: a joining host, one
    # back from maintenance, or one a staff member re-tests waits here for its run...
    ACCEPTANCE = "acceptance", "Acceptance (benchmark before placements)"
    # ...and stays out of placements when a figure came in below the operator's threshold.
    HELD = "held", "Held back (below the acceptance threshold)"


class GPUSource(models.TextChoices):
    NVML = "nvml", "NVML (real NVIDIA GPUs)"
    SIMULATED = "simulated", "Simulated"


class Zone(models.Model):
    """A failure domain: hosts that share a building, power or network. Zones group into
    regions. Placement, volumes and elastic groups name zones (``fleet.zones``)."""

    name = models.SlugField(max_length=63, unique=True, help_text="e.g. cn-east-1a")
    region = models.SlugField(max_length=63, help_text="e.g. cn-east-1")
    label = models.CharField(max_length=100, blank=True, help_text="Shown to customers")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["region", "name"]

    def __str__(self) -> str:
        return self.name


class Host(models.Model):
    """A GPU server running the agent. It joins with a token (stored hashed)."""

    name = models.SlugField(
        max_length=63, unique=True, help_text="Also the agent's queue: host.<name>"
    )
    address = models.CharField(
        max_length=255,
        default="127.0.0.1",
        help_text="Public address customers reach JupyterLab on",
    )
    status = models.CharField(max_length=16, choices=HostStatus.choices, default=HostStatus.ACTIVE)
    zone = models.ForeignKey(
        Zone,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="hosts",
        help_text="Its failure domain; a launch that names a zone is placed only there",
    )
    gpu_source = models.CharField(
        max_length=16, choices=GPUSource.choices, default=GPUSource.SIMULATED
    )
    runtime = models.CharField(
        max_length=16, blank=True, help_text="docker or process, as the agent reports"
    )
    # Checks a join token (fleet.hostlink.token_check_hash); no key can be made from it.
    token_hash = models.CharField(max_length=64, editable=False)
    # The root of the host's signing and spec keys, sealed with a key derived from
    # SECRET_KEY (fleet.hostlink): a database read alone signs nothing.
    keys_sealed = models.TextField(editable=False, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    agent_version = models.CharField(max_length=32, blank=True)
    hf_cache_dir = models.CharField(
        max_length=255,
        blank=True,
        help_text="Host path of a shared Hugging Face cache, mounted read-only",
    )
    topology = models.JSONField(
        default=dict,
        blank=True,
        help_text="GPU pairs (NVLink, NVSwitch, PCIe) and NICs, as the agent reads them",
    )
    driver_version = models.CharField(
        max_length=32, blank=True, help_text="The NVIDIA driver, as the agent reads it"
    )
    driver_cuda = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The newest CUDA the driver supports, as NVML writes it (12040 = 12.4); "
        "placement refuses images that need more (fleet.drivers)",
    )
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def driver_cuda_text(self) -> str:
        from gpurental.fleet.drivers import cuda_text

        return cuda_text(self.driver_cuda)

    def heartbeat_fresh(self, now) -> bool:
        """Heart-beating: its last beat is at most ``HOST_OFFLINE_AFTER`` seconds old."""
        from django.conf import settings

        return (
            self.last_heartbeat_at is not None
            and (now - self.last_heartbeat_at).total_seconds() <= settings.HOST_OFFLINE_AFTER
        )

    @property
    def queue(self) -> str:
        return protocol.host_queue(self.name)


class GPU(models.Model):
    """One physical (or simulated) GPU of a host."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, unique=True)
    model = models.ForeignKey("catalog.GPUModel", on_delete=models.PROTECT, related_name="gpus")
    memory_mb = models.PositiveIntegerField()
    nvlink_peers = ArrayField(models.PositiveSmallIntegerField(), default=list, blank=True)
    is_enabled = models.BooleanField(
        default=True, help_text="Off: never placed (e.g. a faulty GPU)"
    )

    class Meta:
        ordering = ["host__name", "index"]
        verbose_name = "GPU"
        constraints = [
            models.UniqueConstraint(fields=["host", "index"], name="gpu_unique_index_per_host"),
        ]

    def __str__(self) -> str:
        return f"{self.host.name}:{self.index} ({self.model.short_name})"
