"""Back-office building blocks: every admin change leaves an audit event."""

from __future__ import annotations

from django.contrib import admin
from django.forms.models import model_to_dict

from gpurental.accounts.services import audit_record
from gpurental.addresses import client_ip


def _jsonable(value):
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, int | float | bool | str) or value is None:
        return value
    return str(value)


class AuditedAdmin(admin.ModelAdmin):
    """A ModelAdmin whose saves and deletes write AuditEvent rows."""

    def save_model(self, request, obj, form, change):
        changed = form.changed_data if change else list(form.fields)
        super().save_model(request, obj, form, change)
        data = model_to_dict(obj, fields=changed)
        audit_record(
            action=f"admin.{'change' if change else 'add'}",
            actor=request.user,
            obj=obj,
            changes={
                field: _jsonable(data.get(field)) for field in changed if field not in {"password"}
            },
            ip_address=client_ip(request),
        )

    def delete_model(self, request, obj):
        audit_record(
            action="admin.delete", actor=request.user, obj=obj, ip_address=client_ip(request)
        )
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            audit_record(
                action="admin.delete", actor=request.user, obj=obj, ip_address=client_ip(request)
            )
        super().delete_queryset(request, queryset)


class ReadOnlyAdmin(admin.ModelAdmin):
    """For history that must never change: events, the ledger."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
