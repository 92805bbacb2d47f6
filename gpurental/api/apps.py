from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "gpurental.api"
    label = "api"
