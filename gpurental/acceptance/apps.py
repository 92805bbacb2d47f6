from django.apps import AppConfig


class AcceptanceConfig(AppConfig):
    name = "gpurental.acceptance"
    verbose_name = "Host acceptance"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from gpurental.acceptance import receivers  # noqa: F401 - connects fleet's signals
