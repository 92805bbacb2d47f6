from django.apps import AppConfig


class BaremetalConfig(AppConfig):
    name = "gpurental.baremetal"
    label = "baremetal"
    verbose_name = "Dedicated hosts (bare metal)"
