from django.contrib import admin

from gpurental.accounts.admin_mixins import AuditedAdmin
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

    @admin.display(description="aliases")
    def alias_names(self, obj: ImageTemplate) -> str:
        return ", ".join(a.name for a in obj.aliases.all())
