from django import forms
from django.contrib import admin, messages

from gpurental.modelcache.models import CachedModel, CacheEvent
from gpurental.modelcache.services import (
    CacheRefused,
    cache_evict_request,
    cache_fill_request,
    cache_list_request,
)


class FillForm(forms.ModelForm):
    """Adding a row is asking the host's agent to fill its cache: the row appears as
    'filling' and turns 'ready' (or 'failed', with the reason) on the agent's report."""

    class Meta:
        model = CachedModel
        fields = ["host", "repo_id", "source"]
        help_texts = {
            "source": "A folder or .tar/.tar.gz archive in the host agent's import directory "
            "(GPURENTAL_MODEL_IMPORT_DIR): a Hugging Face cache or a plain model folder",
        }

    def validate_unique(self):
        # A model already in the cache may be filled again (a new revision): the service
        # updates its row rather than adding one.
        pass

    def clean(self):
        data = super().clean()
        if not data.get("source"):
            self.add_error("source", "name what to fill from")
        return data


@admin.register(CachedModel)
class CachedModelAdmin(admin.ModelAdmin):
    list_display = ["repo_id", "host", "status", "size_bytes", "files", "revision", "updated_at"]
    list_filter = ["status", "host"]
    search_fields = ["repo_id", "host__name"]
    actions = ["evict", "refresh"]

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = FillForm
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return [f.name for f in CachedModel._meta.fields]

    def save_model(self, request, obj, form, change):
        if change:
            return
        try:
            row = cache_fill_request(
                host=obj.host, source=obj.source, repo_id=obj.repo_id, actor=request.user
            )
        except CacheRefused as exc:
            # The form was valid: report the refusal rather than a server error.
            messages.error(request, str(exc))
            row = CachedModel.objects.filter(host=obj.host, repo_id=obj.repo_id).first()
        if row is not None:
            obj.pk = row.pk

    def response_add(self, request, obj, post_url_continue=None):
        if obj.pk is None:
            return self.response_post_save_add(request, obj)
        return super().response_add(request, obj, post_url_continue)

    @admin.action(description="Evict from the host's cache")
    def evict(self, request, queryset):
        for row in queryset.select_related("host"):
            try:
                cache_evict_request(host=row.host, repo_id=row.repo_id, actor=request.user)
            except CacheRefused as exc:
                messages.error(request, str(exc))
            else:
                messages.info(request, f"asked {row.host.name} to evict {row.repo_id}")

    @admin.action(description="Ask the hosts what their caches hold")
    def refresh(self, request, queryset):
        for host in {row.host for row in queryset.select_related("host")}:
            try:
                cache_list_request(host=host)
            except CacheRefused as exc:
                messages.error(request, str(exc))

    def has_delete_permission(self, request, obj=None):
        return False  # a row goes when the agent reports the model gone: use "Evict"


@admin.register(CacheEvent)
class CacheEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "host", "repo_id", "kind", "actor", "reason"]
    list_filter = ["kind", "host"]
    search_fields = ["repo_id", "host__name"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
