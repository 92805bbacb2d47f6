from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "gpurental.telemetry"
    label = "telemetry"
