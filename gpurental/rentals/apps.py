from django.apps import AppConfig


class RentalsConfig(AppConfig):
    name = "gpurental.rentals"
    label = "rentals"

    def ready(self) -> None:
        from gpurental.rentals import receivers  # noqa: F401 - connects fleet's heartbeat
