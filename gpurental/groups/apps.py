from django.apps import AppConfig


class GroupsConfig(AppConfig):
    name = "gpurental.groups"
    default_auto_field = "django.db.models.BigAutoField"
