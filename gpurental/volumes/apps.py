from django.apps import AppConfig


class VolumesConfig(AppConfig):
    name = "gpurental.volumes"
    verbose_name = "Volumes"
