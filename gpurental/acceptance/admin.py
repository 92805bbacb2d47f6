from django.contrib import admin, messages
from django.template.loader import render_to_string
from django.utils import timezone

from gpurental.acceptance.models import AcceptanceRun, NominalSpec, RunReason, RunStatus
from gpurental.acceptance.selectors import host_runs
from gpurental.acceptance.services import AcceptanceRefused, acceptance_run_request
from gpurental.accounts.admin_mixins import AuditedAdmin
from gpurental.fleet.admin import HostAdmin
from gpurental.fleet.models import Host


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


# The host's page gets the benchmark's action and history here, so that fleet (which
# acceptance builds on) imports nothing of acceptance.
admin.site.unregister(Host)


@admin.register(Host)
class AcceptanceHostAdmin(HostAdmin):
    readonly_fields = [*HostAdmin.readonly_fields, "acceptance_history"]
    actions = [*HostAdmin.actions, "run_acceptance"]

    @admin.display(description="Acceptance benchmark")
    def acceptance_history(self, host):
        runs = host_runs(host=host) if host.pk else []
        latest = next((r for r in runs if r.status in (RunStatus.PASSED, RunStatus.HELD)), None)
        return render_to_string(
            "admin/acceptance/_history.html",
            {
                "runs": runs,
                "latest": latest,
                "latest_threshold": f"{latest.threshold * 100:g}" if latest else "",
            },
        )

    @admin.action(description="Run the acceptance benchmark (no placements until it passes)")
    def run_acceptance(self, request, queryset):
        now = timezone.now()
        for host in queryset:
            try:
                acceptance_run_request(
                    host=host, reason=RunReason.ON_DEMAND, actor=request.user, now=now
                )
            except AcceptanceRefused as exc:
                self.message_user(request, str(exc), level=messages.ERROR)
            else:
                self.message_user(request, f"Acceptance benchmark queued on {host.name}.")
