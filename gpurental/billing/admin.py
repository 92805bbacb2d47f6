from django.contrib import admin

from gpurental.accounts.admin_mixins import AuditedAdmin, ReadOnlyAdmin
from gpurental.billing.models import Charge, Invoice, InvoiceLine, InvoiceStatus, LedgerEntry


@admin.register(Charge)
class ChargeAdmin(ReadOnlyAdmin):
    list_display = [
        "instance",
        "user",
        "period_start",
        "period_end",
        "rate_kind",
        "hourly_rate",
        "amount",
    ]
    list_filter = ["rate_kind"]
    search_fields = ["user__email", "instance__id"]
    date_hierarchy = "period_start"


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "user", "kind", "amount", "description"]
    list_filter = ["kind"]
    search_fields = ["user__email", "description"]
    date_hierarchy = "created_at"


class InvoiceLineInline(admin.TabularInline):
    model = InvoiceLine
    extra = 0

    def _editable(self, obj):
        return obj is None or obj.status == InvoiceStatus.DRAFT

    def has_add_permission(self, request, obj=None):
        return self._editable(obj)

    def has_change_permission(self, request, obj=None):
        return self._editable(obj)

    def has_delete_permission(self, request, obj=None):
        return self._editable(obj)


@admin.register(Invoice)
class InvoiceAdmin(AuditedAdmin):
    list_display = [
        "__str__",
        "user",
        "kind",
        "period_start",
        "status",
        "total",
        "currency",
        "issued_at",
    ]
    list_filter = ["status", "kind"]
    search_fields = ["number", "user__email"]
    date_hierarchy = "period_start"
    inlines = [InvoiceLineInline]

    def has_change_permission(self, request, obj=None):
        # Issued invoices never change; corrections are credit notes.
        return obj is None or obj.status == InvoiceStatus.DRAFT

    def has_delete_permission(self, request, obj=None):
        return obj is None or obj.status == InvoiceStatus.DRAFT
