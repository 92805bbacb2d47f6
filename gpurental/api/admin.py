from django.contrib import admin

from gpurental.accounts.admin_mixins import ReadOnlyAdmin
from gpurental.api.models import IdempotencyKey


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "user", "key", "method", "path", "response_status"]
    list_filter = ["method", "response_status"]
    search_fields = ["key", "path", "user__email"]
    raw_id_fields = ["user"]
    date_hierarchy = "created_at"
