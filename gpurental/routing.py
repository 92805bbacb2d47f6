"""Websocket routes, for the whole project (like ``urls.py``): each app's consumers."""

from django.urls import path

from gpurental.groups.consumers import GroupConsumer
from gpurental.telemetry.consumers import FleetConsumer, HostConsumer, InstanceConsumer

websocket_urlpatterns = [
    path("ws/instances/<str:instance_id>/", InstanceConsumer.as_asgi()),
    path("ws/hosts/<str:host_name>/", HostConsumer.as_asgi()),
    path("ws/fleet/", FleetConsumer.as_asgi()),
    path("ws/groups/<str:group_id>/", GroupConsumer.as_asgi()),
]
