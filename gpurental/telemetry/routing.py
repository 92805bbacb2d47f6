"""Websocket routes."""

from django.urls import path

from gpurental.telemetry.consumers import InstanceConsumer

websocket_urlpatterns = [
    path("ws/instances/<str:instance_id>/", InstanceConsumer.as_asgi()),
]
