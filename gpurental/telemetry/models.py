from django.db import models
from django.db.models import Q


class GpuMinute(models.Model):
    """One GPU's samples over one minute (the agent sends them in batches).

    History, idle detection, "paid vs used" and the 1 h / 24 h charts read these.
    ``instance`` is who held the GPU in that minute, from the control plane's own
    allocations (not the agent's word). Kept ``TELEMETRY_RETENTION_DAYS``.
    """

    # The unique constraint (host first) and the (instance, …) index serve these foreign
    # keys: no index of their own, two fewer to write per row.
    host = models.ForeignKey(
        "fleet.Host", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    gpu_index = models.PositiveSmallIntegerField()
    minute = models.DateTimeField(help_text="Start of the minute (UTC)")
    instance = models.ForeignKey(
        "rentals.Instance",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    samples = models.PositiveSmallIntegerField(help_text="Ticks that answered in this minute")
    util_avg = models.FloatField(help_text="Average GPU utilisation, %")
    util_max = models.FloatField()
    mem_used_avg = models.BigIntegerField(help_text="Bytes")
    mem_used_max = models.BigIntegerField()
    mem_total = models.BigIntegerField()
    temp_max = models.FloatField(null=True, blank=True)
    power_avg = models.FloatField(null=True, blank=True, help_text="W")
    kernel_active = models.BooleanField(
        null=True, blank=True, help_text="A JupyterLab kernel was busy or active; None = unknown"
    )
    simulated = models.BooleanField(default=False)

    class Meta:
        ordering = ["minute", "host", "gpu_index"]
        constraints = [
            models.UniqueConstraint(
                fields=["host", "gpu_index", "minute"], name="gpuminute_one_per_gpu_and_minute"
            ),
            models.CheckConstraint(
                condition=Q(util_avg__gte=0) & Q(util_avg__lte=100) & Q(util_max__gte=0),
                name="gpuminute_util_in_range",
            ),
        ]
        indexes = [
            models.Index(fields=["instance", "minute"]),
            models.Index(fields=["minute"]),
        ]

    def __str__(self) -> str:
        return f"{self.host_id}:{self.gpu_index} {self.minute:%Y-%m-%d %H:%M} {self.util_avg:.0f} %"


class GpuHour(models.Model):
    """One GPU's hour, rolled up from its ``GpuMinute`` rows per holder (a GPU may change
    hands within the hour: one row per instance, and one for the minutes nobody held it).

    Kept ``TELEMETRY_HOURLY_RETENTION_DAYS`` (a year), long after the minutes are dropped:
    the 30-day chart reads these.
    """

    # The unique constraint (host first) and the (instance, …) index serve these foreign
    # keys: no index of their own, two fewer to write per row.
    host = models.ForeignKey(
        "fleet.Host", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    gpu_index = models.PositiveSmallIntegerField()
    hour = models.DateTimeField(help_text="Start of the hour (UTC)")
    instance = models.ForeignKey(
        "rentals.Instance",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    minutes = models.PositiveSmallIntegerField(help_text="Minutes with a rollup in this hour")
    util_avg = models.FloatField(help_text="Average GPU utilisation over those minutes, %")
    util_max = models.FloatField()
    mem_used_avg = models.BigIntegerField(help_text="Bytes")
    mem_used_max = models.BigIntegerField()
    mem_total = models.BigIntegerField()
    temp_max = models.FloatField(null=True, blank=True)
    power_avg = models.FloatField(null=True, blank=True, help_text="W")
    simulated = models.BooleanField(default=False)

    class Meta:
        ordering = ["hour", "host", "gpu_index"]
        constraints = [
            models.UniqueConstraint(
                fields=["host", "gpu_index", "hour", "instance"],
                name="gpuhour_one_per_gpu_hour_and_holder",
                nulls_distinct=False,
            ),
            models.CheckConstraint(
                condition=Q(minutes__gte=1) & Q(minutes__lte=60),
                name="gpuhour_minutes_in_an_hour",
            ),
            models.CheckConstraint(
                condition=Q(util_avg__gte=0) & Q(util_avg__lte=100) & Q(util_max__gte=0),
                name="gpuhour_util_in_range",
            ),
        ]
        indexes = [
            models.Index(fields=["instance", "hour"]),
            models.Index(fields=["hour"]),
        ]

    def __str__(self) -> str:
        return f"{self.host_id}:{self.gpu_index} {self.hour:%Y-%m-%d %H}h {self.util_avg:.0f} %"
