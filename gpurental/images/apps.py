from django.apps import AppConfig


class ImagesConfig(AppConfig):
    name = "gpurental.images"
    verbose_name = "Customers' images"

    def ready(self) -> None:
        from gpurental.images import receivers  # noqa: F401 - connects the receivers
