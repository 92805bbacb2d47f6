from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    name = "gpurental.observability"
    label = "observability"

    def ready(self) -> None:
        from gpurental.observability import counters, logs

        # Every control-plane process: ids ride on the tasks it sends; the workers
        # count the tasks they run.
        logs.connect_celery()
        counters.connect_celery()
