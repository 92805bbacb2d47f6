from django.apps import AppConfig


class AcceptanceConfig(AppConfig):
    name = "gpurental.acceptance"
    verbose_name = "Host acceptance"
    default_auto_field = "django.db.models.BigAutoField"
