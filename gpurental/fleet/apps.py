from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "gpurental.fleet"
    label = "fleet"
