"""Staff back-office for dedicated hosts: plans, each host's bare-metal settings and BMC
(power actions go through services.host_power and leave a PowerEvent), leases."""

from django import forms
from django.contrib import admin, messages

from gpurental.accounts.admin_mixins import AuditedAdmin, ReadOnlyAdmin
from gpurental.baremetal import secrets, services
from gpurental.baremetal.models import (
    BareMetalHost,
    DedicatedPlan,
    Lease,
    LeaseCharge,
    LeaseEvent,
    PowerAction,
    PowerEvent,
)
from gpurental.rentals.exceptions import RentalError


@admin.register(DedicatedPlan)
class DedicatedPlanAdmin(AuditedAdmin):
    list_display = ["name", "gpu_model", "gpu_count", "vcpus", "memory_gb", "hourly_rate"]
    list_filter = ["is_active", "gpu_model"]


class BareMetalHostForm(forms.ModelForm):
    bmc_password = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Stored encrypted (it must be sent to the BMC). Empty keeps the stored one.",
    )

    class Meta:
        model = BareMetalHost
        fields = [
            "host",
            "leasable",
            "allow_host_network",
            "bmc_url",
            "bmc_username",
            "bmc_password",
            "bmc_system_id",
            "bmc_verify_tls",
        ]

    def save(self, commit=True):
        row = super().save(commit=False)
        if self.cleaned_data.get("bmc_password"):
            row.bmc_password_encrypted = secrets.encrypt(self.cleaned_data["bmc_password"])
        if commit:
            row.save()
        return row


@admin.register(BareMetalHost)
class BareMetalHostAdmin(AuditedAdmin):
    form = BareMetalHostForm
    list_display = ["host", "leasable", "allow_host_network", "bmc_url", "power_state"]
    readonly_fields = ["power_state", "power_checked_at"]
    actions = ["power_read", "power_on", "power_off", "power_cycle"]

    def _power(self, request, queryset, action):
        call = {
            PowerAction.READ: services.host_power_read,
            PowerAction.ON: services.host_power_on,
            PowerAction.OFF: services.host_power_off,
            PowerAction.CYCLE: services.host_power_cycle,
        }[action]
        for row in queryset.select_related("host"):
            try:
                event = call(host=row.host, actor=request.user)
            except RentalError as exc:
                self.message_user(request, f"{row.host}: {exc.message}", messages.ERROR)
                continue
            if event.ok:
                self.message_user(
                    request,
                    f"{row.host}: {action} done; power {event.power_state}",
                    messages.SUCCESS,
                )
            else:
                self.message_user(request, f"{row.host}: {event.detail}", messages.ERROR)

    @admin.action(description="Read the power state (BMC)")
    def power_read(self, request, queryset):
        self._power(request, queryset, PowerAction.READ)

    @admin.action(description="Power on (BMC)")
    def power_on(self, request, queryset):
        self._power(request, queryset, PowerAction.ON)

    @admin.action(description="Power off (BMC; refused while leased)")
    def power_off(self, request, queryset):
        self._power(request, queryset, PowerAction.OFF)

    @admin.action(description="Power cycle (BMC; refused while leased)")
    def power_cycle(self, request, queryset):
        self._power(request, queryset, PowerAction.CYCLE)


class LeaseEventInline(admin.TabularInline):
    model = LeaseEvent
    extra = 0
    can_delete = False
    fields = ["created_at", "from_status", "to_status", "reason", "actor"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Lease)
class LeaseAdmin(AuditedAdmin):
    list_display = ["__str__", "user", "plan", "status", "reserved", "period", "billed_until"]
    list_filter = ["status", "reserved", "host"]
    search_fields = ["id", "user__email", "host__name"]
    # State changes go through the lease services: the actions below, the console, the API.
    readonly_fields = [
        "user",
        "plan",
        "host",
        "period",
        "status",
        "reserved",
        "host_network",
        "billed_until",
        "created_at",
        "ended_at",
    ]
    inlines = [LeaseEventInline]
    actions = ["cancel", "end_now"]

    def has_add_permission(self, request):
        return False

    def _each(self, request, queryset, call, done):
        for lease in queryset:
            try:
                call(lease)
            except RentalError as exc:
                self.message_user(request, f"{lease}: {exc.message}", messages.ERROR)
            else:
                self.message_user(request, f"{lease}: {done}", messages.SUCCESS)

    @admin.action(description="Cancel (before its start)")
    def cancel(self, request, queryset):
        self._each(
            request,
            queryset,
            lambda lease: services.lease_cancel(lease=lease, actor=request.user),
            "cancelled",
        )

    @admin.action(description="End now (billing stops; staff may end any lease)")
    def end_now(self, request, queryset):
        self._each(
            request,
            queryset,
            lambda lease: services.lease_end(lease=lease, actor=request.user),
            "ended",
        )


@admin.register(LeaseCharge)
class LeaseChargeAdmin(ReadOnlyAdmin):
    list_display = ["lease", "period_start", "period_end", "rate_kind", "amount"]


@admin.register(PowerEvent)
class PowerEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "host", "action", "ok", "power_state", "detail", "actor"]
    list_filter = ["action", "ok", "host"]
