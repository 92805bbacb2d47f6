from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "gpurental.console"
    label = "console"
