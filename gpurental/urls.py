from django.contrib import admin
from django.urls import include, path

from gpurental.health import healthz, readyz

admin.site.site_header = "gpurental back-office"
admin.site.site_title = "gpurental"
admin.site.index_title = "Plans, hosts, instances, billing"

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("api/", include("gpurental.api.urls")),
    path("", include("gpurental.telemetry.urls")),
    path("billing/", include("gpurental.billing.urls")),
    path("teams/", include("gpurental.teams.urls")),
    path("", include("gpurental.console.urls")),
]
