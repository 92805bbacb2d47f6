"""Host acceptance: the nominal figures a host is measured against, and each run's results."""

import uuid
from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

NOMINAL_FIELDS = (
    "fp32_tflops",
    "tf32_tflops",
    "fp16_tflops",
    "bf16_tflops",
    "memory_bandwidth_gbs",
    "host_link_gbs",
    "p2p_gbs",
    "allreduce_busbw_gbs",
)


def _figure(help_text: str):
    return models.FloatField(null=True, blank=True, help_text=f"{help_text}; empty = not compared")


class NominalSpec(models.Model):
    """What one GPU of a model (or, for the CPU nominal, this kind of CPU) should do, from
    the vendor's spec sheet. Performance figures, not money: floats are right here."""

    gpu_model = models.OneToOneField(
        "catalog.GPUModel",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="nominal",
    )
    is_cpu = models.BooleanField(
        default=False, help_text="The CPU nominal: hosts benchmarked without a GPU"
    )
    per_cpu_core = models.BooleanField(
        default=False,
        help_text="GEMM figures are per CPU core, times the cores the benchmark ran on",
    )
    fp32_tflops = _figure("Dense FP32 TFLOPS")
    tf32_tflops = _figure("Dense TF32 tensor TFLOPS")
    fp16_tflops = _figure("Dense FP16 tensor TFLOPS")
    bf16_tflops = _figure("Dense BF16 tensor TFLOPS")
    memory_bandwidth_gbs = _figure("Memory bandwidth, GB/s")
    host_link_gbs = _figure("Host↔device link per direction (PCIe), GB/s")
    p2p_gbs = _figure("GPU-to-GPU per direction (NVLink, else PCIe), GB/s")
    allreduce_busbw_gbs = _figure("All-reduce bus bandwidth, GB/s")
    source = models.TextField(blank=True, help_text="Where the figures come from")

    class Meta:
        verbose_name = "nominal spec"
        constraints = [
            models.UniqueConstraint(
                fields=["is_cpu"], condition=Q(is_cpu=True), name="nominal_one_cpu"
            ),
            models.CheckConstraint(
                condition=(Q(is_cpu=True) & Q(gpu_model__isnull=True))
                | (Q(is_cpu=False) & Q(gpu_model__isnull=False)),
                name="nominal_cpu_xor_gpu_model",
            ),
            *(
                models.CheckConstraint(
                    condition=Q(**{f"{name}__isnull": True}) | Q(**{f"{name}__gt": 0}),
                    name=f"nominal_{name}_positive",
                )
                for name in NOMINAL_FIELDS
            ),
        ]

    def __str__(self) -> str:
        return "CPU nominal" if self.is_cpu else f"{self.gpu_model} nominal"


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    PASSED = "passed", "Passed"
    HELD = "held", "Below threshold"
    FAILED = "failed", "Could not run"


OPEN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)


class RunReason(models.TextChoices):
    JOIN = "join", "Host joined"
    MAINTENANCE = "maintenance", "Back from maintenance"
    ON_DEMAND = "on_demand", "Staff asked"


class AcceptanceRun(models.Model):
    """One run of the acceptance benchmark on one host, kept for history."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    host = models.ForeignKey("fleet.Host", on_delete=models.CASCADE, related_name="acceptance_runs")
    reason = models.CharField(max_length=16, choices=RunReason.choices)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    requested_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    image = models.CharField(max_length=255)
    smoke = models.BooleanField(default=False)
    threshold = models.DecimalField(
        max_digits=4,
        decimal_places=3,
        help_text="Fraction of nominal needed (memory, links, network), at request time",
    )
    gemm_threshold = models.DecimalField(
        max_digits=4,
        decimal_places=3,
        default=Decimal("0.600"),
        help_text="Fraction of the data sheet's dense GEMM peaks needed, at request time",
    )
    device = models.CharField(max_length=8, blank=True, help_text="cuda or cpu, as measured")
    # [{"key", "label", "unit", "measured", "nominal", "percent", "passed", "note",
    #   "previous", "regressed"}], in display order (services.figures_evaluate).
    figures = models.JSONField(default=list, blank=True)
    failing = models.JSONField(default=list, blank=True, help_text="Labels below threshold")
    raw = models.JSONField(default=dict, blank=True, help_text="What the agent reported")
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-requested_at"]
        constraints = [
            # One run at a time per host: the database has the last word on a double click.
            models.UniqueConstraint(
                fields=["host"],
                condition=Q(status__in=["queued", "running"]),
                name="acceptance_one_open_run_per_host",
            ),
            models.CheckConstraint(
                condition=Q(threshold__gt=0) & Q(threshold__lte=1),
                name="acceptance_threshold_range",
            ),
            models.CheckConstraint(
                condition=Q(gemm_threshold__gt=0) & Q(gemm_threshold__lte=1),
                name="acceptance_gemm_threshold_range",
            ),
        ]
        indexes = [models.Index(fields=["host", "-requested_at"])]

    def __str__(self) -> str:
        return f"{self.host.name} {self.requested_at:%Y-%m-%d %H:%M} {self.status}"

    @property
    def regressions(self) -> list[dict]:
        return [f for f in self.figures if f.get("regressed")]
