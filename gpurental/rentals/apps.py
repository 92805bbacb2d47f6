from django.apps import AppConfig


class RentalsConfig(AppConfig):
    name = "gpurental.rentals"
    label = "rentals"
