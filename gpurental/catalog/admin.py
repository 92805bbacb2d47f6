from django.contrib import admin

from gpurental.accounts.admin_mixins import AuditedAdmin
from gpurental.accounts.services import audit_record
from gpurental.catalog.models import GPUModel, ImageAlias, ImageTemplate, Plan


@admin.register(GPUModel)
class GPUModelAdmin(AuditedAdmin):
    list_display = [
        "name",
        "short_name",
        "memory_gb",
        "bf16_tflops",
        "interconnect",
        "nvlink_bandwidth_gbs",
    ]
    list_filter = ["interconnect"]
    search_fields = ["name", "short_name", "slug"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Plan)
class PlanAdmin(AuditedAdmin):
    list_display = [
        "name",
        "gpu_model",
        "gpu_count",
        "vcpus",
        "memory_gb",
        "hourly_rate",
        "off_peak_discount",
        "reserved_discount",
        "no_gpu_hourly_rate",
        "is_active",
    ]
    list_filter = ["gpu_model", "gpu_count", "is_active"]
    search_fields = ["name", "slug"]
    list_editable = ["is_active"]
    prepopulated_fields = {"slug": ["name"]}


class ImageAliasInline(admin.TabularInline):
    model = ImageAlias
    extra = 0
    fields = ["name", "note"]


@admin.register(ImageTemplate)
class ImageTemplateAdmin(AuditedAdmin):
    inlines = [ImageAliasInline]
    list_display = ["name", "slug", "image", "cpu_image", "port", "alias_names", "is_active"]
    list_filter = ["is_active"]
    search_fields = ["name", "slug", "image"]
    prepopulated_fields = {"slug": ["name"]}

    def save_formset(self, request, form, formset, change):
        # Aliases decide which image a launch runs: each one added, changed or removed is
        # audited like the template itself.
        before = {a.pk: a.name for a in formset.queryset} if formset.model is ImageAlias else {}
        super().save_formset(request, form, formset, change)
        if formset.model is not ImageAlias:
            return
        after = {a.pk: a.name for a in form.instance.aliases.all()}
        if before != after:
            audit_record(
                action="admin.change",
                actor=request.user,
                obj=form.instance,
                changes={"aliases": sorted(after.values()), "were": sorted(before.values())},
            )

    @admin.display(description="aliases")
    def alias_names(self, obj: ImageTemplate) -> str:
        return ", ".join(a.name for a in obj.aliases.all())
