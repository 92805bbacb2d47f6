import datetime as dt
import re
from decimal import Decimal

from django.contrib.postgres.fields import ArrayField
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _


class Interconnect(models.TextChoices):
    NVSWITCH = "nvswitch", _("NVLink + NVSwitch")
    NVLINK = "nvlink", _("NVLink")
    PCIE = "pcie", _("PCIe")


class GPUModel(models.Model):
    """A kind of GPU, with the specs the catalog shows."""

    slug = models.SlugField(
        unique=True, help_text="Short name used by the API and SDK, e.g. a100-80gb."
    )
    name = models.CharField(max_length=64, unique=True, help_text="e.g. A100 80GB SXM")
    short_name = models.CharField(
        max_length=16, help_text="e.g. A100; what gpu_type= matches in the SDK"
    )
    nvml_names = models.JSONField(
        default=list,
        blank=True,
        help_text="Names NVML reports for this model, to map discovered GPUs.",
    )
    memory_gb = models.PositiveIntegerField()
    fp16_tflops = models.DecimalField(
        max_digits=7, decimal_places=1, help_text="Dense FP16 tensor TFLOPS"
    )
    bf16_tflops = models.DecimalField(
        max_digits=7, decimal_places=1, help_text="Dense BF16 tensor TFLOPS"
    )
    fp32_tflops = models.DecimalField(max_digits=7, decimal_places=1)
    memory_bandwidth_gbs = models.PositiveIntegerField(help_text="GB/s")
    interconnect = models.CharField(max_length=16, choices=Interconnect.choices)
    nvlink_bandwidth_gbs = models.PositiveIntegerField(
        default=0, help_text="GB/s per GPU; 0 for PCIe only"
    )
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["memory_gb", "name"]
        verbose_name = "GPU model"
        constraints = [
            models.CheckConstraint(
                condition=Q(fp16_tflops__gte=0) & Q(bf16_tflops__gte=0) & Q(fp32_tflops__gte=0),
                name="gpumodel_tflops_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Plan(models.Model):
    """What a customer rents: N GPUs of one model with CPU, memory and disk, at an hourly rate."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=100)
    gpu_model = models.ForeignKey(GPUModel, on_delete=models.PROTECT, related_name="plans")
    gpu_count = models.PositiveSmallIntegerField()
    vcpus = models.PositiveSmallIntegerField()
    memory_gb = models.PositiveIntegerField()
    disk_gb = models.PositiveIntegerField()
    hourly_rate = models.DecimalField(
        max_digits=10, decimal_places=4, help_text="Price per hour for the whole plan"
    )
    off_peak_discount = models.DecimalField(
        max_digits=5,
        decimal_places=4,
        default=Decimal("0.30"),
        help_text="0.30 = 30 % off in the window",
    )
    off_peak_start = models.TimeField(default=dt.time(0, 0), help_text="Operator's time zone")
    off_peak_end = models.TimeField(default=dt.time(8, 0), help_text="Operator's time zone")
    reserved_discount = models.DecimalField(
        max_digits=5,
        decimal_places=4,
        default=Decimal("0.15"),
        help_text="Discount for booked capacity",
    )
    idle_stop_minutes = models.PositiveIntegerField(
        default=30, help_text="Default idle auto-stop after this many idle minutes; 0 = off"
    )
    # No-GPU mode: a stopped instance started on its own host without its GPUs (to reach
    # or copy out its data while the GPUs are taken), with NO_GPU_VCPUS and NO_GPU_MEMORY_GB.
    no_gpu_hourly_rate = models.DecimalField(
        max_digits=10,
        decimal_places=4,
        default=Decimal("0.10"),
        help_text="Price per hour of an instance of this plan started without its GPUs",
    )
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["gpu_model__memory_gb", "gpu_model__name", "gpu_count"]
        constraints = [
            models.CheckConstraint(condition=Q(gpu_count__gte=1), name="plan_gpu_count_positive"),
            models.CheckConstraint(
                condition=Q(hourly_rate__gte=0), name="plan_hourly_rate_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(no_gpu_hourly_rate__gte=0), name="plan_no_gpu_rate_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(off_peak_discount__gte=0) & Q(off_peak_discount__lt=1),
                name="plan_off_peak_discount_range",
            ),
            models.CheckConstraint(
                condition=Q(reserved_discount__gte=0) & Q(reserved_discount__lt=1),
                name="plan_reserved_discount_range",
            ),
            models.UniqueConstraint(
                fields=["gpu_model", "gpu_count"],
                condition=Q(is_active=True),
                name="plan_one_active_per_model_and_count",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def off_peak_rate(self) -> Decimal:
        return self.hourly_rate * (1 - self.off_peak_discount)

    @property
    def reserved_rate(self) -> Decimal:
        return self.hourly_rate * (1 - self.reserved_discount)


class ImageTemplate(models.Model):
    """A container image customers can launch, e.g. "PyTorch 2.x + CUDA 12 + JupyterLab"."""

    # Not a SlugField: framework names carry versions with dots ("pytorch-2.1").
    slug = models.CharField(
        max_length=50,
        unique=True,
        validators=[
            RegexValidator(
                r"^[a-z0-9][a-z0-9._-]*$",
                "lowercase letters, digits, dots, hyphens and underscores, starting with a letter or digit",
            )
        ],
        help_text="What framework= / image= pick, e.g. pytorch-2.1",
    )
    name = models.CharField(max_length=100)
    image = models.CharField(max_length=255, help_text="Image reference on GPU hosts (NVML)")
    cpu_image = models.CharField(
        max_length=255,
        blank=True,
        help_text="Image used on simulated (no NVIDIA) hosts; empty = same as image",
    )
    port = models.PositiveIntegerField(
        default=8888, help_text="JupyterLab port inside the container"
    )
    http_ports = ArrayField(
        models.PositiveIntegerField(validators=[MinValueValidator(1), MaxValueValidator(65535)]),
        default=list,
        blank=True,
        help_text="Other HTTP ports inside the container (e.g. 6006 for TensorBoard), each "
        "reached at <instance>-<port>.<gateway domain>",
    )
    ssh_port = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Port of the image's sshd (started by its entrypoint); empty = no SSH",
    )
    command = models.JSONField(
        default=list, blank=True, help_text="Overrides the image's command; [] = default"
    )
    env = models.JSONField(default=dict, blank=True)
    cuda_version = models.CharField(
        max_length=5,
        blank=True,
        validators=[RegexValidator(r"^\d{1,2}\.\d{1,2}$", "a CUDA release such as 12.1")],
        help_text="The CUDA release the GPU image is built for (its gpurental.cuda label); "
        "hosts whose driver supports less are not chosen. Empty: no CUDA in it",
    )
    description = models.TextField(blank=True)
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(port__gte=1) & Q(port__lte=65535), name="image_port_range"
            ),
            models.CheckConstraint(
                condition=Q(ssh_port__isnull=True) | (Q(ssh_port__gte=1) & Q(ssh_port__lte=65535)),
                name="image_ssh_port_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def framework(self) -> str:
        """The slug up to its version: "pytorch" of pytorch-2.13, "cuda" of cuda-12.4,
        "jupyter-cpu" of jupyter-cpu."""
        return re.split(r"-(?=\d)", self.slug, maxsplit=1)[0]

    def image_for(self, gpu_source: str) -> str:
        return self.cpu_image if gpu_source == "simulated" and self.cpu_image else self.image


class ImageAlias(models.Model):
    """Another name launches may use for an image template: an old framework name kept
    working ("pytorch-2.1", from the article's snippet) after the image moved on. A launch
    by alias runs the template, and the alias is shown beside it."""

    name = models.CharField(
        max_length=50,
        unique=True,
        validators=[
            RegexValidator(
                r"^[a-z0-9][a-z0-9._-]*$",
                "lowercase letters, digits, dots, hyphens and underscores, starting with a letter or digit",
            )
        ],
        help_text="What framework= / image= may say instead of the template's slug",
    )
    template = models.ForeignKey(ImageTemplate, on_delete=models.CASCADE, related_name="aliases")
    note = models.CharField(
        max_length=200, blank=True, help_text="Shown to customers, e.g. why the alias exists"
    )

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "image aliases"

    def __str__(self) -> str:
        return f"{self.name} → {self.template.slug}"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        # A slug always wins over an alias (catalog.selectors.image_resolve); an alias equal
        # to a slug would never be used, so refuse it rather than let it mislead.
        if ImageTemplate.objects.filter(slug=self.name).exists():
            raise ValidationError({"name": f"{self.name!r} is an image template's slug already"})
