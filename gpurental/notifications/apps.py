from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "gpurental.notifications"
    label = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        from gpurental.notifications import receivers  # noqa: F401 - accounts' revocations
