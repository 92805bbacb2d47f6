from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    name = "gpurental.observability"
    label = "observability"

    def ready(self) -> None:
        from gpurental import logs
        from gpurental.observability import counters

        # Every control-plane process: ids ride on the tasks it sends; the workers
        # count the tasks they run.
        logs.connect_celery()
        counters.connect_celery()
