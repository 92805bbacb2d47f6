"""Back-office for paying in: vouchers (staff create them), payments, webhook events and
automatic top-ups (read only: they are the record of what the provider and the customer
said)."""

from __future__ import annotations

from django.contrib import admin

from gpurental.accounts.admin_mixins import AuditedAdmin, ReadOnlyAdmin
from gpurental.billing.models import (
    AutoTopUp,
    AutoTopUpEvent,
    AutoTopUpMonth,
    Payment,
    PaymentEvent,
    Voucher,
    VoucherRedemption,
)


class VoucherRedemptionInline(admin.TabularInline):
    model = VoucherRedemption
    extra = 0
    can_delete = False
    fields = ["user", "amount", "redeemed_at", "credit_expires_at", "expired_amount"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Voucher)
class VoucherAdmin(AuditedAdmin):
    list_display = [
        "code",
        "amount",
        "uses",
        "max_uses",
        "expires_at",
        "credit_days",
        "first_topup_only",
        "created_at",
    ]
    list_filter = ["first_topup_only"]
    search_fields = ["code", "note"]
    readonly_fields = ["uses", "created_by", "created_at"]
    fields = [
        "code",
        "amount",
        "expires_at",
        "credit_days",
        "max_uses",
        "first_topup_only",
        "note",
        "uses",
        "created_by",
        "created_at",
    ]
    inlines = [VoucherRedemptionInline]

    def get_readonly_fields(self, request, obj=None):
        # Once redeemed, what was promised stays as promised.
        if obj is not None and obj.uses:
            return [*self.readonly_fields, "code", "amount", "credit_days", "first_topup_only"]
        return self.readonly_fields

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)

    def has_delete_permission(self, request, obj=None):
        return obj is None or not obj.uses


@admin.register(Payment)
class PaymentAdmin(ReadOnlyAdmin):
    list_display = [
        "receipt_number",
        "user",
        "amount",
        "currency",
        "status",
        "kind",
        "created_at",
        "paid_at",
    ]
    list_filter = ["status", "kind", "provider"]
    search_fields = ["user__email", "provider_ref"]


@admin.register(PaymentEvent)
class PaymentEventAdmin(ReadOnlyAdmin):
    list_display = ["received_at", "provider", "event_id", "event_type", "outcome", "payment"]
    list_filter = ["outcome", "provider", "event_type"]
    search_fields = ["event_id"]


@admin.register(AutoTopUp)
class AutoTopUpAdmin(ReadOnlyAdmin):
    list_display = ["user", "enabled", "threshold", "amount", "monthly_cap", "card_label"]
    list_filter = ["enabled", "provider"]
    search_fields = ["user__email", "customer_ref"]


@admin.register(AutoTopUpMonth)
class AutoTopUpMonthAdmin(ReadOnlyAdmin):
    list_display = ["user", "month", "charged", "cap", "cap_reached_at"]
    search_fields = ["user__email"]


@admin.register(AutoTopUpEvent)
class AutoTopUpEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "user", "kind", "payment", "detail"]
    list_filter = ["kind"]
    search_fields = ["user__email", "detail"]
