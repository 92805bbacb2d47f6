from django.apps import AppConfig


class TeamsConfig(AppConfig):
    name = "gpurental.teams"
    label = "teams"
    verbose_name = "Teams"
