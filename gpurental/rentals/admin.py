from django.contrib import admin, messages

from gpurental.accounts.admin_mixins import AuditedAdmin, ReadOnlyAdmin
from gpurental.rentals.exceptions import RentalError
from gpurental.rentals.models import (
    Allocation,
    Instance,
    InstanceEvent,
    Reservation,
    ReservationEvent,
)
from gpurental.rentals.services import reservations


class InstanceEventInline(admin.TabularInline):
    model = InstanceEvent
    extra = 0
    can_delete = False
    fields = ["created_at", "kind", "from_status", "to_status", "step", "reason", "actor"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Instance)
class InstanceAdmin(AuditedAdmin):
    list_display = [
        "__str__",
        "user",
        "status",
        "gpu_model",
        "gpu_count",
        "host",
        "image",
        "created_at",
    ]
    list_filter = ["status", "gpu_model", "host"]
    search_fields = ["id", "name", "user__email", "container_id"]
    date_hierarchy = "created_at"
    inlines = [InstanceEventInline]
    # State changes go through the lifecycle services (console, API), never a raw edit.
    readonly_fields = [
        "user",
        "plan",
        "gpu_model",
        "gpu_count",
        "image",
        "host",
        "reservation",
        "status",
        "status_reason",
        "jupyter_port",
        "container_id",
        "created_at",
        "running_since",
        "billed_until",
        "stopped_at",
        "terminated_at",
    ]

    def has_add_permission(self, request):
        return False


@admin.register(InstanceEvent)
class InstanceEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "instance", "kind", "from_status", "to_status", "step", "reason"]
    list_filter = ["kind", "to_status"]
    search_fields = ["instance__id", "reason"]
    date_hierarchy = "created_at"


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin):
    list_display = ["gpu", "instance", "reservation", "period", "created_at"]
    list_filter = ["gpu__host", "gpu__model"]
    search_fields = ["instance__id", "reservation__id", "gpu__uuid"]


class ReservationEventInline(admin.TabularInline):
    model = ReservationEvent
    extra = 0
    can_delete = False
    fields = ["created_at", "from_status", "to_status", "reason", "actor"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Reservation)
class ReservationAdmin(AuditedAdmin):
    list_display = [
        "__str__",
        "user",
        "status",
        "gpu_model",
        "gpu_count",
        "period",
        "price",
        "refunded",
    ]
    list_filter = ["status", "gpu_model"]
    search_fields = ["id", "user__email"]
    # State changes go through the reservation services: the action below, or the console.
    readonly_fields = [
        "user",
        "plan",
        "gpu_model",
        "gpu_count",
        "image",
        "period",
        "status",
        "price",
        "refunded",
        "created_at",
        "cancelled_at",
        "end_warned_at",
    ]
    inlines = [ReservationEventInline]
    actions = ["cancel_with_refund"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Cancel (refund by the cancellation policy)")
    def cancel_with_refund(self, request, queryset):
        for reservation in queryset:
            try:
                reservations.reservation_cancel(reservation=reservation, actor=request.user)
            except RentalError as exc:
                self.message_user(request, f"{reservation}: {exc.message}", messages.ERROR)
            else:
                self.message_user(request, f"{reservation}: cancelled", messages.SUCCESS)
