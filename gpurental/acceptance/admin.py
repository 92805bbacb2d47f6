from django.contrib import admin
from django.template.loader import render_to_string

from gpurental.acceptance.models import AcceptanceRun, NominalSpec
from gpurental.accounts.admin_mixins import AuditedAdmin


@admin.register(NominalSpec)
class NominalSpecAdmin(AuditedAdmin):
    list_display = [
        "__str__",
        "fp32_tflops",
        "tf32_tflops",
        "fp16_tflops",
        "bf16_tflops",
        "memory_bandwidth_gbs",
        "host_link_gbs",
        "p2p_gbs",
        "allreduce_busbw_gbs",
    ]


@admin.register(AcceptanceRun)
class AcceptanceRunAdmin(admin.ModelAdmin):
    """Results are what the benchmark measured: shown, never edited."""

    list_display = ["host", "requested_at", "reason", "status", "device", "failing_figures"]
    list_filter = ["status", "reason", "device"]
    search_fields = ["host__name"]
    fields = [
        "host",
        "reason",
        "status",
        "requested_by",
        "requested_at",
        "started_at",
        "finished_at",
        "image",
        "smoke",
        "threshold",
        "device",
        "figures_table",
        "error",
        "raw",
    ]
    readonly_fields = fields

    @admin.display(description="Failing")
    def failing_figures(self, run):
        return ", ".join(run.failing) or "—"

    @admin.display(description="Figures")
    def figures_table(self, run):
        return render_to_string(
            "admin/acceptance/_figures.html",
            {"run": run, "threshold_percent": f"{run.threshold * 100:g}"},
        )

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
