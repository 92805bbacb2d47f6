from django.apps import AppConfig


class BackupsConfig(AppConfig):
    name = "gpurental.backups"
    verbose_name = "Backups"
