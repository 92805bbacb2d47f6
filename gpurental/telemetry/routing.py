"""Websocket routes (the consumers come with the telemetry issue)."""

websocket_urlpatterns: list = []
