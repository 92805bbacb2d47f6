"""Staff back-office for storage: the GB-month prices, and the meter's charges (read-only)."""

from django.contrib import admin

from gpurental.accounts.admin_mixins import AuditedAdmin, ReadOnlyAdmin
from gpurental.storage.models import StorageCharge, StoragePrice


@admin.register(StoragePrice)
class StoragePriceAdmin(AuditedAdmin):
    list_display = ["kind", "gb_month"]


@admin.register(StorageCharge)
class StorageChargeAdmin(ReadOnlyAdmin):
    list_display = ["account", "kind", "label", "gb", "period_start", "period_end", "amount"]
    list_filter = ["kind"]
    search_fields = ["label", "object_id", "account__email"]
