from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin

from gpurental.accounts.admin_mixins import AuditedAdmin, ReadOnlyAdmin
from gpurental.accounts.models import ApiKey, AuditEvent, SSHKey, User


@admin.register(User)
class UserAdmin(AuditedAdmin, DjangoUserAdmin):
    ordering = ["email"]
    list_display = [
        "email",
        "full_name",
        "company",
        "is_staff",
        "is_active",
        "gpu_quota",
        "date_joined",
    ]
    list_filter = ["is_staff", "is_active", "is_superuser"]
    search_fields = ["email", "full_name", "company"]
    fieldsets = [
        (None, {"fields": ["email", "password"]}),
        ("Profile", {"fields": ["full_name", "company"]}),
        ("Limits", {"fields": ["gpu_quota", "credit_limit"]}),
        (
            "Permissions",
            {"fields": ["is_active", "is_staff", "is_superuser", "groups", "user_permissions"]},
        ),
        ("Dates", {"fields": ["last_login", "date_joined"]}),
    ]
    add_fieldsets = [(None, {"classes": ["wide"], "fields": ["email", "password1", "password2"]})]


@admin.register(ApiKey)
class ApiKeyAdmin(AuditedAdmin):
    list_display = ["name", "prefix", "user", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "prefix", "user__email"]
    readonly_fields = ["prefix", "key_hash", "created_at", "last_used_at"]
    raw_id_fields = ["user"]

    def has_add_permission(self, request):
        # Keys are created by their owner (console, API, manage.py create_api_key): shown once.
        return False


@admin.register(SSHKey)
class SSHKeyAdmin(AuditedAdmin):
    list_display = ["name", "fingerprint", "algorithm", "user", "created_at", "last_used_at"]
    search_fields = ["name", "fingerprint", "user__email"]
    readonly_fields = ["public_key", "algorithm", "fingerprint", "created_at", "last_used_at"]
    raw_id_fields = ["user"]

    def has_add_permission(self, request):
        # Keys are added by their owner (console, API, CLI), through the checks of ssh_key_add.
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "actor_repr",
        "action",
        "object_type",
        "object_repr",
        "ip_address",
    ]
    list_filter = ["action", "object_type"]
    search_fields = ["actor_repr", "object_repr", "object_id", "action"]
    date_hierarchy = "created_at"
