from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "gpurental.console"
    label = "console"

    def ready(self) -> None:
        from gpurental.console import checks  # noqa: F401 - registers the deploy checks
