from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "gpurental.notifications"
    label = "notifications"
    verbose_name = "Notifications"
