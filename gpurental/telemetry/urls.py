from django.urls import path

from gpurental import protocol
from gpurental.telemetry import views

urlpatterns = [
    path("metrics", views.metrics, name="metrics"),
    path(protocol.TELEMETRY_INGEST_PATH, views.telemetry_ingest, name="telemetry_ingest"),
    path(
        "telemetry/instances/<uuid:instance_id>/history/",
        views.instance_history_view,
        name="instance_telemetry_history",
    ),
]
