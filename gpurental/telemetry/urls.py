from django.urls import path

from gpurental.telemetry import views

urlpatterns = [
    path("metrics", views.metrics, name="metrics"),
    path(
        "telemetry/instances/<uuid:instance_id>/history/",
        views.instance_history_view,
        name="instance_telemetry_history",
    ),
]
