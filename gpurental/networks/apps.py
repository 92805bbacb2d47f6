from django.apps import AppConfig


class NetworksConfig(AppConfig):
    name = "gpurental.networks"
    verbose_name = "Private networks"
