from django.contrib import admin, messages
from django.db.models import Count, Q
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.html import format_html

from gpurental.accounts.admin_mixins import AuditedAdmin
from gpurental.fleet import lifecycle, topology
from gpurental.fleet.models import GPU, Host, HostStatus, Zone
from gpurental.fleet.services import host_join_command, host_rotate_token


class GPUInline(admin.TabularInline):
    model = GPU
    extra = 0
    fields = ["index", "model", "uuid", "memory_mb", "nvlink_peers", "is_enabled"]


@admin.register(Zone)
class ZoneAdmin(AuditedAdmin):
    """Zones and regions (``fleet.zones``): set a host's zone on its page."""

    list_display = ["name", "region", "label", "host_count"]
    list_filter = ["region"]
    search_fields = ["name", "region", "label"]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(n_hosts=Count("hosts"))

    @admin.display(description="Hosts", ordering="n_hosts")
    def host_count(self, obj) -> int:
        return obj.n_hosts


@admin.register(Host)
class HostAdmin(AuditedAdmin):
    """Hosts. Their status changes through the actions (``fleet.lifecycle``); it is set on
    the form only when a host is added. ``gpurental.acceptance`` adds its benchmark's
    action and history to this admin (``acceptance/admin.py``)."""

    list_display = [
        "name",
        "address",
        "zone",
        "status",
        "gpu_source",
        "runtime",
        "gpu_total",
        "heartbeat_age",
    ]
    list_filter = ["status", "zone", "gpu_source", "runtime"]
    search_fields = ["name", "address"]
    readonly_fields = [
        "last_heartbeat_at",
        "agent_version",
        "runtime",
        "created_at",
        "topology_matrix",
    ]
    exclude = ["topology"]
    inlines = [GPUInline]
    actions = ["drain", "maintenance", "activate", "rotate_token"]

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

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        return fields if obj is None else [*fields, "status"]

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

    def _transition(self, request, queryset, action, status):
        for host in queryset:
            lifecycle.STAFF_ACTIONS[action](
                host=host, actor=request.user, reason="back-office action"
            )
        self.message_user(request, f"{queryset.count()} host(s) set to {status}.")

    @admin.action(description="Drain (no new placements; running instances stay)")
    def drain(self, request, queryset):
        self._transition(request, queryset, "drain", HostStatus.DRAINING)

    @admin.action(description="Put in maintenance")
    def maintenance(self, request, queryset):
        self._transition(request, queryset, "maintenance", HostStatus.MAINTENANCE)

    @admin.action(description="Reactivate")
    def activate(self, request, queryset):
        self._transition(request, queryset, "activate", HostStatus.ACTIVE)

    @admin.action(description="Rotate join token (shows the new join command)")
    def rotate_token(self, request, queryset):
        for host in queryset:
            self._show_join_command(request, host, host_rotate_token(host=host, actor=request.user))


@admin.register(GPU)
class GPUAdmin(AuditedAdmin):
    list_display = ["__str__", "host", "index", "model", "memory_mb", "uuid", "is_enabled"]
    list_filter = ["host", "model", "is_enabled"]
    search_fields = ["uuid", "host__name"]
