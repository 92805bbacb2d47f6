from django.contrib import admin, messages
from django.db.models import Count, Q
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.html import format_html

from gpurental.acceptance.models import RunReason, RunStatus
from gpurental.acceptance.selectors import host_runs
from gpurental.acceptance.services import AcceptanceRefused, acceptance_run_request
from gpurental.accounts.admin_mixins import AuditedAdmin
from gpurental.fleet import topology
from gpurental.fleet.models import GPU, Host, HostStatus
from gpurental.fleet.services import host_join_command, host_rotate_token, host_set_status


class GPUInline(admin.TabularInline):
    model = GPU
    extra = 0
    fields = ["index", "model", "uuid", "memory_mb", "nvlink_peers", "is_enabled"]


@admin.register(Host)
class HostAdmin(AuditedAdmin):
    list_display = [
        "name",
        "address",
        "status",
        "gpu_source",
        "runtime",
        "gpu_total",
        "heartbeat_age",
    ]
    list_filter = ["status", "gpu_source", "runtime"]
    search_fields = ["name", "address"]
    readonly_fields = [
        "last_heartbeat_at",
        "agent_version",
        "runtime",
        "created_at",
        "topology_matrix",
        "acceptance_history",
    ]
    exclude = ["topology"]
    inlines = [GPUInline]
    actions = ["drain", "maintenance", "activate", "rotate_token", "run_acceptance"]

    def get_changeform_initial_data(self, request):
        # A host added here is benchmarked before its first placement (gpurental/acceptance).
        return {"status": HostStatus.ACCEPTANCE, **super().get_changeform_initial_data(request)}

    @admin.display(description="GPU topology")
    def topology_matrix(self, host):
        if host.pk is None:
            return "Read by the agent when it joins."
        data = host.topology or {}
        gpus = host.gpus.filter(is_enabled=True).select_related("model")
        first = gpus.first()
        summary = topology.host_class(
            gpu_count=gpus.count(),
            short_name=first.model.short_name if first else "GPU",
            topology=data,
        )
        return render_to_string(
            "admin/fleet/host/_topology.html",
            {
                "rows": topology.matrix_rows(data),
                "legend": topology.legend(data),
                "source": data.get("source"),
                "error": data.get("error"),
                "nics": data.get("nics") or [],
                "summary": summary,
            },
        )

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

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(_gpu_total=Count("gpus", filter=Q(gpus__is_enabled=True)))
        )

    @admin.display(description="GPUs", ordering="_gpu_total")
    def gpu_total(self, host):
        return host._gpu_total

    @admin.display(description="Heartbeat", ordering="last_heartbeat_at")
    def heartbeat_age(self, host):
        if host.last_heartbeat_at is None:
            return "never"
        return f"{int((timezone.now() - host.last_heartbeat_at).total_seconds())} s ago"

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if not change:
            self._show_join_command(request, obj, host_rotate_token(host=obj, actor=request.user))

    def _show_join_command(self, request, host, token):
        messages.warning(
            request,
            format_html(
                "Join command for <b>{}</b> (the token is shown only now): <code>{}</code>",
                host.name,
                host_join_command(host=host, token=token),
            ),
        )

    def _set_status(self, request, queryset, status):
        for host in queryset:
            host_set_status(
                host=host, status=status, actor=request.user, reason="back-office action"
            )
        self.message_user(request, f"{queryset.count()} host(s) set to {status}.")

    @admin.action(description="Drain (no new placements; running instances stay)")
    def drain(self, request, queryset):
        self._set_status(request, queryset, HostStatus.DRAINING)

    @admin.action(description="Put in maintenance")
    def maintenance(self, request, queryset):
        self._set_status(request, queryset, HostStatus.MAINTENANCE)

    @admin.action(description="Reactivate")
    def activate(self, request, queryset):
        self._set_status(request, queryset, HostStatus.ACTIVE)

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

    @admin.action(description="Rotate join token (shows the new join command)")
    def rotate_token(self, request, queryset):
        for host in queryset:
            self._show_join_command(request, host, host_rotate_token(host=host, actor=request.user))


@admin.register(GPU)
class GPUAdmin(AuditedAdmin):
    list_display = ["__str__", "host", "index", "model", "memory_mb", "uuid", "is_enabled"]
    list_filter = ["host", "model", "is_enabled"]
    search_fields = ["uuid", "host__name"]
